"""Summarizes an MLAKIT_SM90_TRACE timeline (lines "T role id clock" printed by mlakit at exit).

Roles: 0 and 1 the consumer warpgroups, 2 the producer warp, 3 the watcher warp. Events (ids):
0 a block starts in a consumer's loop; own block: 1 its first column chunk waited for, 2 its last,
3 S = Q K^T done, 4 P published, 5 P V done (stage released); the other warpgroup's block: 6 its
V chunks waited for, 7 the owner's P seen, 5 P V done; producer: 8 the block's copies issued;
watcher: 9 the block's first column chunk landed, 10 its last. The narrow tile (no "other"
events) has each warpgroup's own blocks only (0-5 as above, 4 = P^T stored), summarized per stage.
Medians over the steady state (the first and last 16 blocks left out), in SM clock cycles.
Usage: python3 scripts/trace_sm90.py LOG
"""
import statistics
import sys


def main(path):
    events = {0: [], 1: [], 2: [], 3: []}
    for line in open(path):
        if line.startswith("T "):
            _, role, ident, clock = line.split()
            events[int(role)].append((int(ident), int(clock)))

    def blocks(role):
        out, cur = [], None
        for ident, clock in events[role]:
            if ident == 0:
                if cur:
                    out.append(cur)
                cur = {0: clock}
            elif cur is not None:
                cur[ident] = clock
        if cur:
            out.append(cur)
        return out

    b0, b1 = blocks(0), blocks(1)
    issued = [c for i, c in events[2] if i == 8]
    first = [c for i, c in events[3] if i == 9]
    last = [c for i, c in events[3] if i == 10]
    if not any(i in (6, 7) for i, _ in events[0]):
        narrow(b0, b1, issued, first, last)
        return
    n = min(len(b0), len(b1), len(issued))
    print(f"blocks traced: {len(b0)} (warpgroup 0), {len(b1)} (1), {len(issued)} issued")
    lo, hi = (16, n - 16) if n > 40 else (2, n - 2)
    if hi <= lo:
        return
    rows = {}

    def add(name, value):
        rows.setdefault(name, []).append(value)

    for k in range(lo, hi - 1):
        add("block period (warpgroup 0, start to start)", b0[k + 1][0] - b0[k][0])
    for k in range(lo, hi):
        for b in (b0[k], b1[k]):
            if 1 in b:
                add("own: loop top to first chunk waited for", b[1] - b[0])
                add("own: first to last chunk waited for (Q K^T issue)", b[2] - b[1])
                add("own: last chunk to S done", b[3] - b[2])
                add("own: softmax, P stored and published", b[4] - b[3])
                add("own: P V issued and done", b[5] - b[4])
                if k < len(first):
                    add("load: issue to first chunk landed", first[k] - issued[k])
                    add("load: issue to last chunk landed", last[k] - issued[k])
                    add("load: last chunk landed to the owner's loop top", b[0] - last[k])
            elif 7 in b:
                add("other: loop top to its V chunks waited for", b[6] - b[0])
                add("other: waiting for the owner's P", b[7] - b[6])
                add("other: P V issued and done", b[5] - b[7])
    for name, values in rows.items():
        print(f"  {name:52s} median {statistics.median(values):7.0f}")


def narrow(b0, b1, issued, first, last):
    """The narrow tile: warpgroup w computes every block of stage w (block k is warpgroup k % 2's
    (k // 2)-th), and a stage's next copies are issued once its last column chunk is released."""
    n = min(len(issued), len(first), len(last), 2 * min(len(b0), len(b1)))
    print(f"narrow tile: blocks traced {n}")
    lo, hi = (16, n - 18) if n > 40 else (2, n - 4)
    rows = {}
    for k in range(lo, hi):
        b = (b0, b1)[k % 2][k // 2]
        for name, value in (
            ("block period (issue to issue)", issued[k + 1] - issued[k]),
            ("stage cycle (issue of block k to issue of k + 2)", issued[k + 2] - issued[k]),
            ("load: issue to first chunk landed", first[k] - issued[k]),
            ("load: issue to last chunk landed", last[k] - issued[k]),
            ("hold: last chunk landed to S^T done", b[3] - last[k]),
            ("hold: S^T done to P^T stored (softmax)", b[4] - b[3]),
            ("hold: P^T stored to the last chunk released (P V)", b[5] - b[4]),
            ("released to the stage's next issue", issued[k + 2] - b[5]),
            ("S^T: last chunk seen to done", b[3] - b[2]),
        ):
            rows.setdefault(name, []).append(value)
    for name, values in rows.items():
        print(f"  {name:52s} median {statistics.median(values):7.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
