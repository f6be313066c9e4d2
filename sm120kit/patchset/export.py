"""``sm120kit export``: a variant as patch files, one ``series.mbox`` for ``git am`` and ``series``.

The output directory is written under a temporary name and renamed into place, so it is either
complete or absent. ``SHA256SUMS`` lists every file written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import ExitCode, UserError
from sm120kit.models.series import Series
from sm120kit.patchset.render import new_table
from sm120kit.patchset.targets import select
from sm120kit.report import to_jsonable


@dataclass
class ExportResult:
    alias: str
    variant: str
    directory: str
    patches: list[str]
    mbox: str
    series_file: str
    files: list[str] = field(default_factory=list)
    exit_code: int = ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = to_jsonable(self)
        return d

    def render(self, console: Any) -> None:
        t = new_table(f"exported {self.alias} (variant {self.variant}) to {self.directory}", "file")
        for f in self.files:
            t.add_row(f)
        console.print(t)
        console.print(f"apply with: git am -3 {self.mbox}")


def export_variant(series: Series, alias: str, out_dir: Path) -> ExportResult:
    target, variant = select(series, alias)
    variant.check_checksums()
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory", hint="choose another -o DIR")
    if not out.parent.is_dir():
        raise UserError(f"parent directory {out.parent} does not exist")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    names: list[str] = []
    try:
        with open(tmp / "series.mbox", "wb") as mbox:
            for p in variant.patches:
                data = variant.patch_path(p).read_bytes()
                (tmp / p.file).write_bytes(data)
                names.append(p.file)
                if not data.startswith(b"From "):
                    raise UserError(f"patch {p.file} is not git format-patch (mbox) output")
                mbox.write(data if data.endswith(b"\n") else data + b"\n")
        (tmp / "series").write_text(
            f"# sm120kit series {series.id}, variant {variant.name}, target {alias}"
            f" (base {target.base_ref})\n" + "".join(n + "\n" for n in names),
            encoding="utf-8",
        )
        files = [*names, "series", "series.mbox"]
        sums = "".join(
            f"{hashlib.sha256((tmp / f).read_bytes()).hexdigest()}  {f}\n" for f in files
        )
        (tmp / "SHA256SUMS").write_text(sums, encoding="utf-8")
        files.append("SHA256SUMS")
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ExportResult(
        alias=alias, variant=variant.name, directory=str(out), patches=names,
        mbox=str(out / "series.mbox"), series_file=str(out / "series"), files=files,
    )
