"""A small learned reader of abstention, for the replies the clause rules cannot read.

The rules of abstention.py read a lack by its parts (a negation before a verb of saying,
a source that is silent, a rejected premise, "not yet"). Free wording has none of them:
"Sadly the notes stop short of that", "Mình bó tay với câu này", "Your guess is as good
as mine". Where the rules see neither a lack nor an answer by a number or a guess
(`Abstention.rule == "unsure"`), this model decides.

The model is a logistic regression over binary features of the reply in text_key form
(its words and adjacent word pairs; Vietnamese syllables keep their tones), each scaled
by 1/sqrt(number of the reply's features).
It is trained here with scikit-learn from labelled replies kept in the repository
(`TRAINING`), and shipped as plain numbers in `abstention_model.json`: a weight per
feature and an intercept. Reading it needs no scikit-learn and costs microseconds; the
file records the scikit-learn version that trained it, the training data's SHA-256 and
the feature scheme, and loading refuses a file whose scheme or checksum does not match
(a model trained for other features would read replies silently wrong).

    python -m evalpipe.scoring.answers.abstention_model train    # rewrite the model file
    python -m evalpipe.scoring.answers.abstention_model check    # retrain, compare, report

Training is deterministic (lbfgs, fixed data order): with the pinned scikit-learn the
same data gives the same file, which `check` verifies.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any

from evalpipe import jsonl
from evalpipe.errors import InputError
from evalpipe.scoring.answers.normalize import text_key

MODEL = Path(__file__).with_name("abstention_model.json")
LABELS = Path(__file__).resolve().parent.parent / "labels"
# The labelled replies the model learns from: written replies (abstention_replies.jsonl,
# split "dev") and the abstained field of the grading set. Held-out rows never train.
TRAINING = ("abstention_replies.jsonl", "grading_labels.jsonl")
FEATURES = "words+pairs/sqrt:v1"  # the scheme below; a model for another is refused
FORMAT = 1
THRESHOLD = 0.5
C = 4.0  # inverse regularisation strength
_JOINED = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")


def features(text: str) -> set[str]:
    """The reply's binary features: its words and adjacent word pairs (text_key form, so
    Vietnamese syllables keep their tones). Character n-grams were measured too: twice
    the weights, no better agreement (docs/scoring.md)."""
    words = text_key(_JOINED.sub("", text or "")).split()
    out = {"w:" + w for w in words}
    out.update(f"p:{a} {b}" for a, b in pairwise(words))
    return out


@dataclass(frozen=True, slots=True)
class Model:
    weights: dict[str, float]
    intercept: float
    threshold: float
    meta: dict[str, Any]

    def probability(self, text: str) -> float:
        """The model's probability that the reply abstains."""
        found = features(text)
        if not found:
            return 0.0
        score = self.intercept + sum(self.weights.get(f, 0.0) for f in found) / math.sqrt(
            len(found))
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, score))))

    def abstains(self, text: str) -> bool:
        return self.probability(text) >= self.threshold


def _checksum(weights: dict[str, float], intercept: float) -> str:
    body = json.dumps([sorted(weights.items()), intercept], ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


@lru_cache(maxsize=4)
def load(path: Path = MODEL) -> Model:
    """The shipped model. A file of another format or feature scheme, or whose weights do
    not match their checksum, is refused with an InputError naming it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the abstention model: {exc}", file=str(path),
                         expected="the JSON file written by `abstention_model train`") from exc
    meta = data.get("meta") or {}
    if meta.get("format") != FORMAT or meta.get("features") != FEATURES:
        raise InputError("the abstention model was trained for another feature scheme",
                         file=str(path), field="meta.features",
                         expected=f"format {FORMAT}, features {FEATURES!r}")
    weights = {str(k): float(v) for k, v in (data.get("weights") or {}).items()}
    intercept = float(data.get("intercept", 0.0))
    if meta.get("sha256") != _checksum(weights, intercept):
        raise InputError("the abstention model's weights do not match their checksum",
                         file=str(path), field="meta.sha256",
                         expected="the file as `abstention_model train` wrote it")
    return Model(weights, intercept, float(meta.get("threshold", THRESHOLD)), meta)


# --- training (scikit-learn) ---------------------------------------------------------------

def training_rows(labels: Path = LABELS) -> list[tuple[str, bool]]:
    """(reply, abstained) of every training row, in file order; rows of a held-out split
    are left out."""
    rows = []
    for name in TRAINING:
        for _, row in jsonl.records(labels / name):
            if "held_out" in str(row.get("split", "")) or row.get("frozen"):
                continue
            rows.append((str(row["reply"]), bool(row["abstained"])))
    return rows


def data_checksum(rows: list[tuple[str, bool]]) -> str:
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode("utf-8")).hexdigest()


def fit(rows: list[tuple[str, bool]], c: float = C) -> tuple[dict[str, float], float]:
    """Weights and intercept of a logistic regression on the rows' features."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression

    vocabulary: dict[str, int] = {}
    indptr, indices, values = [0], [], []
    for text, _ in rows:
        found = sorted(features(text))
        for f in found:
            indices.append(vocabulary.setdefault(f, len(vocabulary)))
            values.append(1.0 / math.sqrt(len(found)))
        indptr.append(len(indices))
    x = csr_matrix((values, indices, indptr), shape=(len(rows), len(vocabulary)))
    y = np.array([abstained for _, abstained in rows])
    model = LogisticRegression(C=c, class_weight="balanced", solver="lbfgs", max_iter=5000)
    model.fit(x, y)
    coef = model.coef_[0]
    names = sorted(vocabulary, key=vocabulary.__getitem__)
    # four decimals are enough for a verdict and keep the file small and diff-able
    weights = {n: round(float(coef[i]), 4) for i, n in enumerate(names)
               if round(float(coef[i]), 4) != 0.0}
    return weights, round(float(model.intercept_[0]), 4)


def train(labels: Path = LABELS) -> dict[str, Any]:
    import sklearn

    rows = training_rows(labels)
    weights, intercept = fit(rows)
    meta = {"format": FORMAT, "features": FEATURES, "threshold": THRESHOLD, "C": C,
            "scikit_learn": sklearn.__version__, "training_files": list(TRAINING),
            "training_rows": len(rows), "training_abstaining": sum(a for _, a in rows),
            "training_sha256": data_checksum(rows), "sha256": _checksum(weights, intercept)}
    return {"meta": meta, "intercept": intercept, "weights": dict(sorted(weights.items()))}


def write(model: dict[str, Any], path: Path = MODEL) -> None:
    path.write_text(json.dumps(model, ensure_ascii=False, indent=0, sort_keys=True) + "\n",
                    encoding="utf-8")


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    if command == "train":
        model = train()
        write(model)
        meta = model["meta"]
        print(f"wrote {MODEL}: {len(model['weights'])} weights from {meta['training_rows']} "
              f"replies ({meta['training_abstaining']} abstaining), scikit-learn "
              f"{meta['scikit_learn']}")
        return 0
    if command == "check":
        import sklearn

        shipped = json.loads(MODEL.read_text(encoding="utf-8"))
        pinned = shipped["meta"]["scikit_learn"]
        if sklearn.__version__ != pinned:
            print(f"scikit-learn {sklearn.__version__} is installed, the model was trained "
                  f"with {pinned}: retraining may differ; install {pinned} to check",
                  file=sys.stderr)
            return 2
        again = train()
        same = again == shipped
        print("the shipped model is what its training data and scikit-learn give"
              if same else "the shipped model differs from a retrain: run `train`")
        return 0 if same else 1
    print("usage: python -m evalpipe.scoring.answers.abstention_model train|check",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
