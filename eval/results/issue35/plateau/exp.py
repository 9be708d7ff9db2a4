# mypy: ignore-errors
# An experiment script of issue 35, kept as it ran (paths of the machine it ran on).
"""Retrieval experiments on the eval's whole-archive index (test half, long + short): topic@5 per slice."""
from __future__ import annotations
import hashlib, json, sys, time, os
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, "/work/main")
import httpx
from eval.evaluation.datasets import load_questions, with_short_forms
from eval.stack.services import EmbeddedStack
from worker.db.connect import connect
from worker.retrieval.factory import build_retriever
from worker.retrieval.recall import single_connection
from worker.retrieval.retriever import Retriever
from worker.retrieval.fusion import fuse_rrf
from worker.retrieval.lexical import clean_question
from worker.retrieval.route import Route

D = Path("/work/shared/data/urho3d")
files = [D / "eval/questions-dev.jsonl", D / "eval/out-of-domain-dev.jsonl"]
extra = [Path(p) for p in os.environ.get("EXP_QUESTIONS", "").split(",") if p]
half = os.environ.get("EXP_HALF", "test")
qs = load_questions(extra or files)
if not extra:
    qs = with_short_forms(qs)
qs = [q for q in qs if q.answerable and (half == "all" or q.half == half)]
variants = sys.argv[1:]

orig = Retriever._embed_and_recall
def prose_recall(self, question, exclude, trace, k, query_vector=None):
    vector, ranking = orig(self, question, exclude, trace, k, query_vector)
    prose = clean_question(question)
    if prose and prose != question.strip() and len(prose) >= 20:
        v2 = self.embedder.embed([prose], kind="query")[0]
        r2 = [replace(c, cosine=None, vector_rank=None) for c in self.index.recall(v2, k, exclude)]
        fused = fuse_rrf([ranking, r2], k=60)
        known = {c.post_id: c for c in ranking}
        ranking = tuple(known.get(c.post_id, c) for c in fused)[: k]
    return vector, ranking

import numpy as np
PRF = {"beta": 0.0, "m": 3, "conn": None}
def prf_recall(self, question, exclude, trace, k, query_vector=None):
    vector, ranking = CURRENT(self, question, exclude, trace, k, query_vector)
    top = [c.post_id for c in ranking[: PRF["m"]]]
    if not top:
        return vector, ranking
    rows = PRF["conn"].execute("SELECT embedding::vector::real[] FROM post_index WHERE post_id = ANY(%s)", (top,)).fetchall()
    q = np.asarray(vector, dtype=np.float32); q /= np.linalg.norm(q)
    m = np.mean([np.asarray(r[0], dtype=np.float32) / np.linalg.norm(r[0]) for r in rows], axis=0)
    v2 = q + PRF["beta"] * m; v2 /= np.linalg.norm(v2)
    r2 = [replace(c, cosine=None, vector_rank=None) for c in self.index.recall(v2.tolist(), k, exclude)]
    fused = fuse_rrf([ranking, r2], k=60)
    known = {c.post_id: c for c in ranking}
    return vector, tuple(known.get(c.post_id, c) for c in fused)[: k]

LEX = {"mode": "all", "q": None}
orig_lex = Retriever._lexical
def lex_patch(self, question, exclude, trace):
    return orig_lex(self, LEX["q"] if LEX["q"] else question, exclude, trace)
Retriever._lexical = lex_patch

stack = EmbeddedStack(D, cache=Path("/work/cache/35/pg"))
settings = stack.start().settings
try:
    for var in variants:
        name, _, opts = var.partition(":")
        kv = dict(o.split("=") for o in opts.split(",") if o)
        global CURRENT
        CURRENT = prose_recall if kv.pop("prose", "0") == "1" else orig
        PRF["beta"] = float(kv.pop("prf", "0")); PRF["m"] = int(kv.pop("prfm", "3"))
        Retriever._embed_and_recall = prf_recall if PRF["beta"] > 0 else CURRENT
        LEX["mode"] = kv.pop("lexq", "all")
        ranker = kv.pop("ranker", "auto"); lexical = kv.pop("lexical", "1") == "1"
        rs = settings.retrieval.model_copy(update={k: (float(v) if "." in v else int(v)) for k, v in kv.items()})
        s = settings.model_copy(update={"retrieval": rs})
        http = httpx.Client(timeout=120)
        conn = connect(s.database, autocommit=True)
        PRF["conn"] = connect(s.database, autocommit=True)
        route = Route(ranker=ranker, lexical=lexical, excerpt=False)
        res = {"long": [], "short": [], "conv": []}
        t0 = time.time()
        with build_retriever(s, connections=single_connection(conn), keyword=None, http=http, calibrated=False) as r:
            for q in qs:
                a = q.asked()
                LEX["q"] = {"all": None, "own": a.own, "title_own": "\n\n".join(x for x in (a.title, a.own) if x),
                            "title_own_earlier": "\n\n".join(x for x in (a.title, a.own, a.earlier_question) if x)}[LEX["mode"]]
                out = r.retrieve(a.text, exclude_post_ids=q.exclude_post_ids, route=route)
                topics = list(dict.fromkeys(src.topic_id for src in out.sources))[:5]
                hit = bool(set(topics) & set(q.gold_topic_ids))
                sl = "conv" if q.shape else ("short" if q.id.endswith("/short") else "long")
                res[sl].append((q.id, hit))
        conn.close(); http.close()
        summ = {sl: (round(sum(h for _, h in v) / len(v), 3), len(v)) for sl, v in res.items() if v}
        print(json.dumps({"variant": var, **summ, "s": round(time.time() - t0)}), flush=True)
        Path(f"/work/cache/35/exp-{hashlib.md5(var.encode()).hexdigest()[:8]}.json").write_text(json.dumps({"variant": var, "res": res}))
finally:
    stack.stop()
