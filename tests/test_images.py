"""Images for agy (`images.py`): checked by base64, size and magic bytes, named, written into a
private folder (0700, files 0600) and removed; and the prompt lines that ask agy to view them."""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from pathlib import Path

import pytest

from agy_provider.errors import UsageError
from agy_provider.live.images import MAX_IMAGE_BYTES
from agy_provider.live.images import ImageStaging
from agy_provider.live.images import check_images
from agy_provider.live.images import image_lines
from agy_provider.live.images import newest_images
from agy_provider.live.prompt import build_prompt
from agy_provider.pi.types import Context
from agy_provider.pi.types import ImageContent
from agy_provider.pi.types import TextContent
from agy_provider.pi.types import UserMessage

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 24
GIF = b"GIF89a" + b"\x00" * 24
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 16


def image(data: bytes, mime_type: str) -> ImageContent:
    return ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=mime_type)


def test_each_type_agy_views_passes_by_its_magic_bytes() -> None:
    checked = check_images(
        [
            image(PNG, "image/png"),
            image(JPEG, "image/jpg"),  # an alias hosts use
            image(GIF, "IMAGE/GIF"),
            image(WEBP, "image/webp"),
        ]
    )
    assert [c.file_name for c in checked] == [
        "image-1.png",
        "image-2.jpg",
        "image-3.gif",
        "image-4.webp",
    ]
    assert [c.data for c in checked] == [PNG, JPEG, GIF, WEBP]


def test_base64_wrapped_over_lines_still_decodes() -> None:
    text = base64.encodebytes(PNG * 4).decode("ascii")  # 76 columns and newlines
    assert check_images([ImageContent(data=text, mime_type="image/png")])[0].data == PNG * 4


@pytest.mark.parametrize(
    ("block", "says"),
    [
        (ImageContent(data="not base64!", mime_type="image/png"), "not base64"),
        (image(b"BM" + b"\x00" * 30, "image/bmp"), "type 'image/bmp' cannot be sent"),
        (image(PNG, "image/jpeg"), "declared image/jpeg, but its bytes are image/png"),
        (image(b"plain text", "image/png"), "its bytes are not a png, jpeg, gif, webp image"),
        (
            ImageContent(data="A" * (MAX_IMAGE_BYTES // 3 * 4 + 8), mime_type="image/png"),
            "larger than 20 MiB",
        ),
    ],
    ids=["bad-base64", "unsupported-type", "type-mismatch", "not-an-image", "too-large"],
)
def test_a_bad_image_is_a_usage_error_naming_it(block: ImageContent, says: str) -> None:
    with pytest.raises(UsageError, match=r"^image 2 of the message") as refused:
        check_images([image(PNG, "image/png"), block])
    assert says in str(refused.value)


def test_the_prompt_lines_are_byte_stable_and_one_per_image() -> None:
    checked = check_images([image(PNG, "image/png"), image(JPEG, "image/jpeg")])
    paths = ["/tmp/x/image-1.png", "/tmp/x/image-2.jpg"]
    assert image_lines(checked, paths) == (
        "Attached image 1 (image/png): view the file /tmp/x/image-1.png\n"
        "Attached image 2 (image/jpeg): view the file /tmp/x/image-2.jpg"
    )
    with pytest.raises(UsageError):
        image_lines(checked, paths[:1])


def test_build_prompt_checks_the_images_and_adds_their_lines_when_staged() -> None:
    message = UserMessage(
        content=[TextContent(text="What is this?"), image(PNG, "image/png")], timestamp=0
    )
    context = Context(messages=[message], system_prompt="Be brief.")
    # Before: "agy-provider cannot send images to agy".
    assert build_prompt(context, resume=True) == "What is this?"
    staged = build_prompt(context, resume=True, image_paths=["/tmp/s/image-1.png"])
    assert (
        staged == "What is this?\n\nAttached image 1 (image/png): view the file /tmp/s/image-1.png"
    )
    fresh = build_prompt(context, resume=False, image_paths=["/tmp/s/image-1.png"])
    assert fresh.startswith("<system>\nBe brief.\n</system>") and fresh.endswith(staged)
    alone = Context(messages=[UserMessage(content=[image(PNG, "image/png")], timestamp=0)])
    assert build_prompt(alone, resume=True, image_paths=["/p/image-1.png"]).startswith("Attached")
    bad = Context(messages=[UserMessage(content=[image(b"nope", "image/png")], timestamp=0)])
    with pytest.raises(UsageError, match="not a png"):
        build_prompt(bad, resume=True)


def test_only_the_newest_user_messages_images_are_staged() -> None:
    older = UserMessage(content=[image(PNG, "image/png")], timestamp=0)
    newest = UserMessage(content="and now?", timestamp=0)
    assert newest_images(Context(messages=[older, newest])) == []
    assert len(newest_images(Context(messages=[newest, older]))) == 1


async def test_staging_writes_a_private_folder_and_removes_it() -> None:
    staging = ImageStaging([image(PNG, "image/png"), image(GIF, "image/gif")])
    await staging.open()
    folder = Path(staging.folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [os.path.basename(p) for p in staging.paths] == ["image-1.png", "image-2.gif"]
    for path, data in zip(staging.paths, (PNG, GIF), strict=True):
        assert os.path.isabs(path) and Path(path).read_bytes() == data
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    await staging.aclose()
    assert not folder.exists()
    await staging.aclose()  # again: nothing


async def test_a_staging_cancelled_mid_write_is_still_removed() -> None:
    staging = ImageStaging([image(PNG * 100_000, "image/png")])
    opening = asyncio.ensure_future(staging.open())
    await asyncio.sleep(0)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    await staging.aclose()  # waits for the write still running, then removes what it made
    assert not staging.folder or not os.path.exists(staging.folder)


async def test_a_bad_image_stages_nothing() -> None:
    staging = ImageStaging([image(b"nope", "image/png")])
    with pytest.raises(UsageError):
        await staging.open()
    assert staging.folder == ""
    await staging.aclose()
