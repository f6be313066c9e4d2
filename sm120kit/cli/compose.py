"""Where the CLI composes capabilities: a bundle written by collect / warmup / validate's
supervisor embeds doctor's tiers 0-1 and is judged by diagnose's rules engine. The services
that write bundles take these as :class:`~sm120kit.services.snapshot.BundleHooks`; no capability
imports another.

Both functions are module-level so that a Ray node can unpickle them by reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sm120kit.services.snapshot import BundleHooks


def doctor_report() -> dict[str, Any]:
    """Doctor tiers 0-1 (what every bundle embeds as ``doctor.json``)."""
    from sm120kit.doctor import run_doctor

    return run_doctor(tiers=(0, 1)).to_dict()


def judge_bundle(root: Path) -> list[str]:
    """The diagnose rules engine over a bundle: the verdict, the next two findings, the fix."""
    from sm120kit.diagnose.engine import diagnose

    res = diagnose([root])
    lines = [res.verdict]
    for f in res.findings[1:3]:
        ph = f" [phase: {f.phase}]" if f.phase else ""
        lines.append(f"also: {f.category}: {f.summary}{ph}")
    if res.findings and res.findings[0].fix:
        lines.append(f"Fix: {res.findings[0].fix}")
    return lines


def report_path(bundle: Path) -> Path:
    """Where a bundle's report page goes by default: beside it, ``<bundle name>.html``."""
    name = bundle.name
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return bundle.with_name(name + ".html")


def write_report(bundle: Path, out: Path | None = None, *, judge: bool = True
                 ) -> tuple[Path, dict[str, Any]]:
    """Render ``bundle`` as one self-contained HTML page (services.htmlreport) with diagnose's
    findings (``judge``); write it atomically to ``out`` (default :func:`report_path`).
    Returns the page's path and the diagnosis (empty when not judged)."""
    import os

    from sm120kit.errors import UserError
    from sm120kit.evidence.bundle_reader import BundleReader
    from sm120kit.services.htmlreport import read_view, render_html

    if not bundle.exists():
        raise UserError(f"{bundle}: no such bundle", hint="sm120kit report BUNDLE.tar.gz|DIR")
    diagnosis: dict[str, Any] = {}
    if judge:
        from sm120kit.diagnose.engine import diagnose

        diagnosis = diagnose([bundle]).to_dict()
    with BundleReader(bundle) as reader:
        if not reader.is_bundle():
            raise UserError(f"{bundle}: not a sm120kit collect bundle (no manifest.json, "
                            "timeline.json or stacks/)", hint="sm120kit report BUNDLE.tar.gz|DIR")
        page = render_html(read_view(reader, report_path(bundle).stem, diagnosis))
    dest = out or report_path(bundle)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {dest}: {exc.strerror or exc}",
                        hint="choose a writable file with -o") from None
    return dest, diagnosis


def bundle_hooks(*, doctor: bool = True) -> BundleHooks:
    return BundleHooks(doctor_report=doctor_report if doctor else None, judge=judge_bundle)


__all__ = ["bundle_hooks", "doctor_report", "judge_bundle", "report_path", "write_report"]
