/* The same decode through the installed C API, built with pkg-config's flags. */
#include <math.h>
#include <mlakit/mlakit_c.h>
#include <stdint.h>
#include <stdio.h>

int main(void) {
  static uint16_t q[2 * 576], kv[16 * 576], out[2 * 512];
  float lse[2];
  int32_t table[1] = {0}, lens[1] = {3};
  for (int i = 0; i < 2 * 576; ++i) q[i] = 0x3f80;   /* bf16 1.0 */
  for (int i = 0; i < 16 * 576; ++i) kv[i] = 0x3f00; /* bf16 0.5 */
  mlakit_problem_t p;
  mlakit_problem_init(&p);
  p.h_q = 2, p.page_size = 16, p.max_batch = 1, p.max_seq_len = 16, p.return_lse = 1;
  mlakit_decoder_t* d = NULL;
  if (mlakit_decoder_create(&p, "cpu", &d) != 0) {
    printf("create: %s\n", mlakit_last_error());
    return 1;
  }
  mlakit_run_args_t a;
  mlakit_run_args_init(&a);
  a.batch = 1, a.q = q, a.kv_cache = kv, a.num_pages = 1, a.block_table = table;
  a.block_table_stride = 1, a.seq_lens = lens, a.out = out, a.lse = lse;
  const mlakit_status_t st = mlakit_decoder_run(d, &a, NULL, 0, NULL);
  mlakit_decoder_destroy(d);
  if (st != 0) {
    printf("run: %s\n", mlakit_last_error());
    return 1;
  }
  const int ok = out[0] == 0x3f00 && out[1023] == 0x3f00 && fabsf(lse[0] - lse[1]) == 0.0f;
  printf("mlakit C consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
