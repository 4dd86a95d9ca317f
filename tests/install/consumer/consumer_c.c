/* The same decode through the installed C API, built with pkg-config's flags, and a top-k. */
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
  /* An op of a sparse layer: the top 2 of 5 logits as sparse indices (positions 1 and 3). */
  static const float logits[5] = {0.1f, 3.0f, -1.0f, 2.0f, 0.5f};
  int32_t indices[2] = {-7, -7}, len5[1] = {5};
  mlakit_topk_args_t t;
  mlakit_topk_args_init(&t);
  t.batch = 1, t.k = 2, t.logits = logits, t.max_len = 5, t.seq_lens = len5;
  t.block_table = table, t.block_table_stride = 1, t.page_size = 16, t.indices = indices;
  if (mlakit_topk_indices(MLAKIT_DEVICE_CPU, &t, NULL) != 0) {
    printf("topk: %s\n", mlakit_last_error());
    return 1;
  }
  const int ok = out[0] == 0x3f00 && out[1023] == 0x3f00 && fabsf(lse[0] - lse[1]) == 0.0f &&
                 indices[0] == 1 && indices[1] == 3 &&
                 mlakit_kv_page_bytes(MLAKIT_FP8_E4M3, MLAKIT_KV_FP8_BLOCKWISE, 64) == 64 * 656;
  printf("mlakit C consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
