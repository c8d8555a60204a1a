#!/usr/bin/env python3
"""Where each restart's time goes, from a DTRAIN_TIMELINE file (base/timeline.h) written by
`DTRAIN_TIMELINE=FILE scripts/fault_goodput.sh ...` (docs/FAULTS.md, "Where a restart's time goes").

For each `kill -9` line: the step in flight (the killed process's last step end -> the kill), the
supervisor seeing the death, its bookkeeping (restarts.jsonl, the checkpoint check) up to the new
process's start or the forked worker's wake-up, exec and dynamic linking (-> main), config, data
and model (-> trainer ready), the checkpoint read, the first and second steps; and the cost of the
kill: the new process's first step end - the killed one's last step end - one warm step (the step
the kill interrupted is trained again). Prints one row per restart and the medians.
Usage: scripts/restart_timeline.py FILE
"""
import re
import statistics
import sys

events = []  # (time, pid, text)
for line in open(sys.argv[1]):
    t, pid, text = line.rstrip("\n").split(" ", 2)
    events.append((float(t), int(pid), text))
events.sort()

def first(after, pid=None, pattern=""):
    for t, p, text in events:
        if t >= after and (pid is None or p == pid) and re.search(pattern, text):
            return t, p, text
    return None

# A step's end, once per process: ranks that are threads each mark it; the last mark is when the
# step ended for the process.
ends = {}
for t, p, x in events:
    if m := re.match(r"step (\d+) done \(([\d.]+) s\)", x):
        ends[(p, int(m.group(1)))] = (t, p, float(m.group(2)))
steps = sorted(ends.values())
warm = statistics.median(s for _, _, s in steps)
cols = ["in flight", "seen", "supervisor", "exec+link", "data+model", "checkpoint", "step 1",
        "step 2", "kill cost"]
rows = []
for t_kill, victim, _ in [e for e in events if e[2] == "kill -9"]:
    before = [t for t, p, _ in steps if p == victim and t <= t_kill]
    seen = first(t_kill, pattern=f"supervisor saw the end of pid {victim}")
    if not before or not seen:
        continue
    start = first(seen[0], pattern=r"supervisor (started pid|woke the forked worker) (\d+)")
    new = int(start[2].split()[-1])
    woken = first(seen[0], new, r"fork-server worker woken")
    main = first(start[0] if woken is None else seen[0], new, r"^main$")
    ready = first(seen[0], new, r"trainer ready")
    ckpt = first(seen[0], new, r"checkpoint loaded")
    new_steps = [(t, s) for t, p, s in steps if p == new and t >= seen[0]]
    if not (ready and ckpt and len(new_steps) >= 2):
        continue
    row = {
        "in flight": t_kill - before[-1],
        "seen": seen[0] - t_kill,
        "supervisor": start[0] - seen[0],
        "exec+link": (main[0] - start[0]) if woken is None else 0.0,
        "data+model": (ready[0] - main[0]) if woken is None else ready[0] - start[0],
        "checkpoint": ckpt[0] - ready[0],
        "step 1": new_steps[0][0] - ckpt[0],
        "step 2": new_steps[1][1],
        "kill cost": new_steps[0][0] - before[-1] - warm,
    }
    rows.append(row)
print(f"warm step (median of all steps): {warm:.3f} s; {len(rows)} restarts")
print(" ".join(f"{c:>10}" for c in cols))
for row in rows:
    print(" ".join(f"{row[c]:10.3f}" for c in cols))
if rows:
    print(" ".join(f"{statistics.median(r[c] for r in rows):10.3f}" for c in cols), " (median)")
