"""Writes of the experiments app: `sets` (evaluation sets, their versions, items and checks;
JSONL import and export), `strategies`, `runs` (experiments and sweeps: plan, start, cancel,
evaluate once their replay job ends)."""
