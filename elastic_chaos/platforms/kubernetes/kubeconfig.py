"""The one reader of kubeconfig files: checked before a run starts, with the file, line and reason.

The kubernetes client reads a kubeconfig only when the platform first talks to
the cluster: a file that is a folder, not UTF-8, not YAML, not a kubeconfig,
or that names a context it does not hold once failed only after the report
folder was made, as a traceback or a long "no usable Kubernetes credentials".
``check`` reads it the way the client will and refuses what the client would
refuse, naming the file, the line (for YAML) and what is wrong. It does not
contact the cluster: credentials that are well-formed but wrong are the API
server's to refuse.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError

MAX_BYTES = 16 * 1024 * 1024
"""The largest kubeconfig read (one with every certificate embedded is a few kilobytes)."""


def check(path: Path, context: str | None = None) -> dict[str, Any]:
    """The kubeconfig at ``path`` as a mapping, after checking it holds ``context`` (default:
    its current-context). Raises SpecError naming the file (and line) and what is wrong.
    Reads the file; contacts nothing."""
    text = _text(path)
    doc = _yaml(text, path)
    if not isinstance(doc, dict):
        raise SpecError(f"kubeconfig {path}: not a kubeconfig (a YAML mapping with clusters, contexts and users; "
                        f"this is a {type(doc).__name__})")
    for key in ("clusters", "contexts", "users"):
        if doc.get(key) is not None and not isinstance(doc.get(key), list):
            raise SpecError(f"kubeconfig {path}: '{key}' is not a list")
    names = [str(c.get("name")) for c in doc.get("contexts") or [] if isinstance(c, dict)]
    wanted = context or doc.get("current-context")
    if not wanted:
        raise SpecError(f"kubeconfig {path}: no current-context; pass --kube-context NAME (one of: "
                        f"{', '.join(names) or 'none: it holds no context'})")
    if str(wanted) not in names:
        raise SpecError(f"kubeconfig {path}: context {str(wanted)[:100]!r} is not one of its contexts "
                        f"({', '.join(names) or 'it holds none'})" + ("" if context else "; pass --kube-context NAME"))
    return doc


def _text(path: Path) -> str:
    if path.is_dir():
        raise SpecError(f"kubeconfig {path}: not a file (a folder); pass the kubeconfig file (--kubeconfig PATH)")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"kubeconfig {path}: cannot read it ({exc.strerror or exc}); pass a kubeconfig file you "
                        "can read (--kubeconfig PATH)") from None
    if len(data) > MAX_BYTES:
        raise SpecError(f"kubeconfig {path}: larger than {MAX_BYTES // (1024 * 1024)} MiB: not a kubeconfig")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SpecError(f"kubeconfig {path}:{line}: not UTF-8 text (byte {exc.start})") from None


def _yaml(text: str, path: Path) -> Any:
    try:
        import yaml
    except ImportError as exc:   # the kubernetes client needs PyYAML: without it nothing can run here anyway
        raise SpecError("the kubernetes platform needs the kubernetes client (and PyYAML): "
                        "pip install 'elastic-chaos[kubernetes]'") from exc
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml refuses deep nesting at once
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark is not None else "line unknown"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"kubeconfig {path}: not YAML at {line}: {problem}") from None
    except RecursionError:
        raise SpecError(f"kubeconfig {path}: nested too deeply to be a kubeconfig") from None
