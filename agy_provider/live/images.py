"""The images of a turn's newest user message, handed to agy as files it views by absolute path.

Pure: checking (base64, size, type by magic bytes), file names and the prompt's lines; I/O:
`ImageStaging` writes them into a private folder (0700, files 0600) given to agy as one more
`--add-dir`, and removes it when the turn ends, whatever the ending.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Final

from agy_provider import lifeline
from agy_provider.errors import TurnError
from agy_provider.errors import UsageError
from agy_provider.owned_folders import make_owned_folder
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import UserMessage

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "CheckedImage",
    "ImageStaging",
    "check_images",
    "image_lines",
    "newest_images",
]

# 20 MiB decoded per image: Gemini's own cap for an image sent inline in a request (agy's model
# sees the file it views the same way), far above any screenshot or photo a host sends, and it
# bounds what one turn holds in memory and writes to the temporary folder.
MAX_IMAGE_BYTES: Final = 20 * 1024 * 1024

# What agy's view_file shows a model as an image, each with its file name extension.
IMAGE_TYPES: Final = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
}
_ALIASES: Final = {"image/jpg": "image/jpeg"}

# The line the prompt gives each image (agy-sim reads the same shape: `sim/engine.py`).
_LINE: Final = "Attached image {number} ({mime_type}): view the file {path}"


@dataclasses.dataclass(frozen=True, slots=True)
class CheckedImage:
    """One image of the message, decoded and of a type its bytes prove."""

    number: int  # 1-based, in the message's order
    mime_type: str
    data: bytes

    @property
    def file_name(self) -> str:
        return f"image-{self.number}.{IMAGE_TYPES[self.mime_type]}"


def newest_images(context: Context) -> list[ImageContent]:
    """The image blocks of the newest message when it is the user's (else none)."""
    newest = context.messages[-1] if context.messages else None
    if not isinstance(newest, UserMessage) or isinstance(newest.content, str):
        return []
    return [block for block in newest.content if isinstance(block, ImageContent)]


def _sniffed(data: bytes) -> str:
    """The image type the bytes show ("" when none of ours)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return ""


def check_images(images: Sequence[ImageContent]) -> list[CheckedImage]:
    """Each image decoded and checked, or `UsageError` naming the image and what is wrong:
    base64 that does not decode, more than `MAX_IMAGE_BYTES`, a type other than png, jpeg, gif
    or webp, or bytes that are not the declared type."""
    checked = []
    kinds = ", ".join(t.removeprefix("image/") for t in IMAGE_TYPES)
    for number, image in enumerate(images, start=1):
        what = f"image {number} of the message"
        declared = _ALIASES.get(image.mime_type.strip().lower(), image.mime_type.strip().lower())
        if declared not in IMAGE_TYPES:
            raise UsageError(
                f"{what}: type {image.mime_type!r} cannot be sent to agy (it views {kinds})"
            )
        text = "".join(image.data.split())  # base64 wrapped over lines is still base64
        if len(text) // 4 * 3 > MAX_IMAGE_BYTES + 2:  # refused before decoding it
            raise UsageError(
                f"{what} is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB; send it smaller"
            )
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise UsageError(
                f"{what}: its data is not base64 ({exc}); pass the image's bytes base64-encoded"
            ) from exc
        if len(data) > MAX_IMAGE_BYTES:
            raise UsageError(
                f"{what} is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB; send it smaller"
            )
        found = _sniffed(data)
        if not found:
            raise UsageError(
                f"{what} is declared {declared}, but its bytes are not a {kinds} image"
            )
        if found != declared:
            raise UsageError(f"{what} is declared {declared}, but its bytes are {found}")
        checked.append(CheckedImage(number, declared, data))
    return checked


def image_lines(images: Sequence[CheckedImage], paths: Sequence[str]) -> str:
    """The prompt's lines asking agy to view each image at its absolute path (byte-stable)."""
    if len(images) != len(paths):
        raise UsageError(f"{len(images)} image(s) but {len(paths)} staged file(s)")
    return "\n".join(
        _LINE.format(number=image.number, mime_type=image.mime_type, path=path)
        for image, path in zip(images, paths, strict=True)
    )


class ImageStaging:
    """A turn's images as files in a private temporary folder, for as long as the turn runs.

    `open()` writes them (in a worker thread); `aclose()` removes the folder, waiting first for
    a write still running (an abort may cancel `open()`, never the write itself). `folder` and
    `paths` are known once `open()` returns.
    """

    def __init__(self, images: Sequence[ImageContent]) -> None:
        self._images = tuple(images)
        self.folder = ""
        self.paths: tuple[str, ...] = ()
        self._writing: concurrent.futures.Future[None] | None = None

    async def open(self) -> None:
        """Check and write the images. Raises `UsageError` (a bad image) or `TurnError`."""
        from agy_provider.workers import in_background  # its threads start at import: not here

        self._writing = in_background(self._write)
        await asyncio.wrap_future(self._writing)

    async def aclose(self) -> None:
        """Remove the folder and everything in it (again: nothing)."""
        from agy_provider.workers import off_loop

        if self._writing is not None:
            await off_loop(self._remove)

    def _write(self) -> None:
        checked = check_images(self._images)
        try:
            # 0700, ours alone, named after this process: should it die mid-turn, its lifeline
            # removes the folder, or else the next host's start does (`owned_folders`).
            self.folder = make_owned_folder("images")
            lifeline.keep_folder(self.folder)
            if "\n" in self.folder or "\r" in self.folder:
                raise OSError(f"the temporary folder {self.folder!r} has a line break in its name")
            paths = []
            for image in checked:
                path = os.path.join(self.folder, image.file_name)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(path, flags, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(image.data)
                paths.append(path)
        except OSError as exc:
            self._remove_folder()
            raise TurnError(
                f"could not write the message's images for agy into {tempfile.gettempdir()}: "
                f"{exc.strerror or exc}; free disk space or set TMPDIR to a writable folder"
            ) from exc
        self.paths = tuple(paths)

    def _remove(self) -> None:
        if self._writing is not None:
            concurrent.futures.wait([self._writing])
        self._remove_folder()

    def _remove_folder(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            lifeline.drop_folder(self.folder)
