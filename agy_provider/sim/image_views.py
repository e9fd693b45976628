"""agy-sim looking at images: the files a prompt asks to view, read from the `--add-dir` roots.

Pure but for reading those files. A prompt line `Attached image N (type): view the file /abs`
(the shape agy-provider writes) becomes a `view_file` call; its output, and the answer's
`{viewed_images}`, say each file's size and sha256, so a test can tell the file was really read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Sequence
from typing import Final

from agy_provider.sim.scenario import PlannerSpec
from agy_provider.sim.scenario import ToolSpec
from agy_provider.sim.scenario import Usage

__all__ = ["VIEWED_IMAGES_PLACEHOLDER", "ImageViews", "image_views"]

# In a planner's text, the summary of what the turn's view_file calls found.
VIEWED_IMAGES_PLACEHOLDER: Final = "{viewed_images}"
NO_IMAGES: Final = "no image was attached"

_LINE: Final = re.compile(r"^Attached image (\d+) \(([^)\n]*)\): view the file (/[^\n]*)$", re.M)
_VIEW_USAGE: Final = Usage(input=1200, thinking=12, response=8)


@dataclasses.dataclass(frozen=True, slots=True)
class ImageViews:
    """The model call that views the images, and the summary its answer quotes."""

    planner: PlannerSpec
    summary: str


def _inside(path: str, roots: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    return any(
        os.path.commonpath([real, os.path.realpath(root)]) == os.path.realpath(root)
        for root in roots
    )


def _look(path: str, roots: Sequence[str]) -> tuple[str, int]:
    """What view_file answers for `path`, and its exit code (1: it could not be viewed)."""
    if not _inside(path, roots):
        return f"{path} is outside every --add-dir folder; it cannot be viewed", 1
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}", 1
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}", 0


def image_views(prompt: str, roots: Sequence[str]) -> ImageViews | None:
    """The view_file calls the prompt's image lines ask for (None when it names no image)."""
    found = _LINE.findall(prompt)
    if not found:
        return None
    tools = []
    summary = []
    for number, _mime_type, path in found:
        output, code = _look(path, roots)
        tools.append(
            ToolSpec(
                name="view_file",
                args={"AbsolutePath": path},
                output=output,
                exit_code=code,
                tool_action="Viewing image",
                tool_summary=f"View image {number}",
            )
        )
        summary.append(f"{os.path.basename(path)}: {output if code == 0 else 'not viewable'}")
    planner = PlannerSpec(
        thinking=("I'll look at the attached images.",), usage=_VIEW_USAGE, tools=tuple(tools)
    )
    return ImageViews(planner, "; ".join(summary))
