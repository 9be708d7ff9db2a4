"""Test-half figures of a calibrate run restricted to the questions neither set of weights was fitted
on: this run's test half (hash of the topic id) ∩ the eval's test half (hash of `urho-<topic id>`,
where the shipped weights were fitted on the other half)."""
import json
import sys

from eval.evaluation.datasets import half_of
from worker.calibration.run import wilson

result = json.load(open(sys.argv[1]))
rows = {q: r for q, r in result["per_question"].items() if r["half"] == "test"}


def clean(qid: str) -> bool:
    if qid.startswith("ood-"):
        return True  # the shipped weights were not fitted on citebot's shipped OOD set
    tid = qid.removeprefix("topic-").removesuffix("/short")
    return half_of(f"urho-{tid}") == "test"


out = {"method": __doc__, "test_half_questions": len(rows)}
for subset_name, keep in (("test_half", lambda q: True), ("unseen_by_both", clean)):
    fig = {}
    for weights in ("calibrated", "shipped"):
        ans = [r[weights] for q, r in rows.items() if keep(q) and not q.startswith("ood-")]
        ood = [r[weights] for q, r in rows.items() if keep(q) and q.startswith("ood-")]
        f = {}
        for key, pool in (("topic@5", ans), ("post@5", ans), ("abstained", ans)):
            k = sum(bool(p.get(key)) for p in pool)
            f[f"answerable {key}"] = {"value": round(k / len(pool), 4), "n": len(pool), "ci95": wilson(k, len(pool))}
        k = sum(p["abstained"] for p in ood)
        f["ood abstained"] = {"value": round(k / len(ood), 4), "n": len(ood), "ci95": wilson(k, len(ood))}
        fig[weights] = f
    out[subset_name] = fig
print(json.dumps(out, indent=1))
