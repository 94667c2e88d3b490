"""Make an installed safety-gymnasium 1.0.0 importable on Python >= 3.11 (``make safety``).

Python 3.11's dataclasses reject unhashable defaults, and safety-gymnasium 1.0.0 declares
its geoms' ``color`` and ``group`` fields with numpy-array defaults
(``color: np.array = COLOR['vase']``), so ``import safety_gymnasium`` fails with
"mutable default <class 'numpy.ndarray'> for field color is not allowed". This rewrites
those lines of the *installed copy* to ``field(default_factory=lambda: COLOR['vase'])``:
every instance still gets the same array as before, so behaviour is unchanged. Python
3.10 needs no patch (``make safety`` prefers it); run with the interpreter to patch::

    .venv-safety/bin/python envs/safety/patch_py311.py

Idempotent. Like ``worker.py``, a plain script that imports nothing from constrained_grpo.
"""

import importlib.util
import re
import sys
from pathlib import Path

_DEFAULT = re.compile(r"^(\s+\w+: np\.(?:array|ndarray)) = ((?:COLOR|GROUP)\[[^\]]+\])[ \t]*(\r?\n?)$")
_MARK = "import dataclasses as _dataclasses  # added by constrained_grpo's patch_py311\n"


def patch(package_dir: Path) -> list[Path]:
    """Rewrite the array defaults under ``package_dir``; returns the files changed."""
    changed = []
    for path in sorted(package_dir.rglob("*.py")):
        lines = path.read_text().splitlines(keepends=True)
        out = [_DEFAULT.sub(r"\1 = _dataclasses.field(default_factory=lambda: \2)\3", ln) for ln in lines]
        if out == lines:
            continue
        if _MARK not in out:
            # After any `from __future__` import, which must stay first.
            at = max((i + 1 for i, ln in enumerate(out) if ln.startswith("from __future__")), default=0)
            out.insert(at, _MARK)
        path.write_text("".join(out))
        changed.append(path)
    return changed


def main() -> int:
    if sys.version_info < (3, 11):
        print(f"patch_py311: Python {sys.version.split()[0]} needs no patch")
        return 0
    spec = importlib.util.find_spec("safety_gymnasium")
    if spec is None or spec.origin is None:
        print("patch_py311: safety_gymnasium is not installed in this interpreter", file=sys.stderr)
        return 1
    changed = patch(Path(spec.origin).parent)
    print(f"patch_py311: {len(changed)} file(s) of {Path(spec.origin).parent} patched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
