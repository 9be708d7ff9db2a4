"""Cross-lingual probe: the same forum question in English and in French vs its gold answer.

    python -m eval.stack.modelserver.french_probe [--data DIR]

The dev questions are English only. To see what the English MiniLM does with a French-speaking
member, 12 dev questions were rewritten by hand as a short English question and its French
translation (below). For each, the cosine with the gold accepted answer (title + first 300
characters, as the reranker reads it) and the calibrated logit's zone are compared.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from eval.stack.modelserver.calibrate import DEFAULT_DATA, load_posts
from eval.stack.modelserver.models import Calibration, EmbeddingModel

PAIRS: dict[str, tuple[str, str]] = {
    "urho-1163": (
        "How can I make a portal so the character travels to another scene, "
        "like a second world seen through it?",
        "Comment créer un portail pour que le personnage passe dans une autre scène, "
        "un deuxième monde visible à travers ?",
    ),
    "urho-2375": (
        "My 2D sprite with a scaled down texture has jagged edges, how can I smooth them?",
        "Mon sprite 2D avec une texture réduite a des bords crénelés, comment les lisser ?",
    ),
    "urho-2678": (
        "How do I select an object in the scene with the mouse so I can animate it?",
        "Comment sélectionner un objet de la scène avec la souris pour l'animer ?",
    ),
    "urho-2762": (
        "What does the CMake flag -DANDROID_STL=c++_static do when compiling for Android?",
        "À quoi sert l'option CMake -DANDROID_STL=c++_static quand on compile pour Android ?",
    ),
    "urho-2818": (
        "How can I save and load objects in memory at runtime, not in files, to use them as prefabs?",
        "Comment sauvegarder et charger des objets en mémoire pendant l'exécution, sans fichiers, "
        "pour en faire des prefabs ?",
    ),
    "urho-2931": (
        "In my 2D tile map I can see the neighbouring tiles bleeding at the edges, how do I fix it?",
        "Dans ma tilemap 2D on voit les tuiles voisines déborder sur les bords, comment corriger ça ?",
    ),
    "urho-2961": (
        "Building with MinGW fails with unknown type name WAVEOUTCAPS2W in SDL_winmm.c",
        "La compilation avec MinGW échoue : type inconnu WAVEOUTCAPS2W dans SDL_winmm.c",
    ),
    "urho-3003": (
        "Does the engine support SVG vector graphics?",
        "Est-ce que le moteur gère les images vectorielles SVG ?",
    ),
    "urho-3040": (
        "How do I get and set the local angular velocity of a rigid body, independently of its mass?",
        "Comment lire et régler la vitesse angulaire locale d'un corps rigide, indépendamment de sa masse ?",
    ),
    "urho-3190": (
        "How can I control which of several parallel billboards on the same plane is drawn on top?",
        "Comment choisir lequel de plusieurs billboards parallèles sur le même plan est dessiné au-dessus ?",
    ),
    "urho-3240": (
        "I have a problem compiling for Android on Windows 7 with the newest SDK and NDK",
        "J'ai un problème pour compiler vers Android sous Windows 7 avec les derniers SDK et NDK",
    ),
    "urho-3358": (
        "Image::GetPixel() returns weird results, I can't get the colour of a pixel",
        "Image::GetPixel() renvoie des résultats bizarres, je n'arrive pas à lire la couleur d'un pixel",
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.stack.modelserver.french_probe", description=__doc__
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="forum data directory")
    args = parser.parse_args(argv)
    lines = (args.data / "eval/questions-dev.jsonl").read_text(encoding="utf-8").splitlines()
    questions = {q["id"]: q for q in map(json.loads, lines)}
    model = EmbeddingModel()
    cal = Calibration.load()
    rows = []
    print("question    cos(en, gold)  cos(fr, gold)  cos(en, fr)")
    for qid, (en, fr) in PAIRS.items():
        q = questions[qid]
        posts = {p.id: p for p in load_posts(args.data / "topics" / f"{q['gold_topic_ids'][0]}.json")}
        v = model.embed([en, fr, posts[q["gold_post_ids"][0]].text])
        row = (float(v[0] @ v[2]), float(v[1] @ v[2]), float(v[0] @ v[1]))
        rows.append(row)
        print(f"{qid:<11} {row[0]:>13.3f}  {row[1]:>13.3f}  {row[2]:>11.3f}")
    r = np.array(rows)
    en_logit, fr_logit = cal.a * r[:, 0] + cal.b, cal.a * r[:, 1] + cal.b
    figures = {
        "n": len(rows),
        "mean_cos_en_gold": round(float(r[:, 0].mean()), 4),
        "mean_cos_fr_gold": round(float(r[:, 1].mean()), 4),
        "mean_cos_en_fr": round(float(r[:, 2].mean()), 4),
        "en_normal_zone": int((en_logit >= 0).sum()),
        "fr_normal_zone": int((fr_logit >= 0).sum()),
        "en_abstain_zone": int((en_logit < -4).sum()),
        "fr_abstain_zone": int((fr_logit < -4).sum()),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
