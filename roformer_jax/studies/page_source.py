"""What a results page reads: its raw root (each study read once, by name), where its figures
go, and how to ask git what changed since a commit (results_page.render builds one per render).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable

from roformer_jax.studies.study_record import JOIN, RawStudy, join, read_raw


@dataclasses.dataclass
class Page:
    """The raw root a page reads, each study read once (`study`); where figures are drawn; and
    `changed`: commit -> the code files changed since (None: unknown), for page_provenance."""

    raw_root: str
    figures_dir: str | None  # None: figures are named, not drawn
    changed: Callable[[str], list[str] | None]
    studies: dict[str, RawStudy] = dataclasses.field(default_factory=dict)

    def study(self, name: str) -> RawStudy:
        """The study of folder `name`, or of folders joined by study_record.JOIN read as one
        (study_record.join)."""
        if name not in self.studies and JOIN in name:
            self.studies[name] = join([self.study(part) for part in name.split(JOIN)])
        if name not in self.studies:
            if not os.path.isdir(os.path.join(self.raw_root, name)):
                folders = sorted(os.listdir(self.raw_root))
                raise ValueError(f"no study {name!r} in {self.raw_root}: {folders}")
            self.studies[name] = read_raw(os.path.join(self.raw_root, name))
        return self.studies[name]


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
