"""agy-sim's image views (`sim/image_views.py`): the files a prompt's image lines name become
`view_file` calls, read only inside the `--add-dir` roots, reported by size and sha256."""

from __future__ import annotations

from pathlib import Path

from agy_provider.sim.image_views import image_views

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
LINE = "Attached image {n} (image/png): view the file {path}"


def test_agy_sim_views_only_files_inside_its_add_dir_roots(tmp_path: Path) -> None:
    inside, outside = tmp_path / "root", tmp_path / "other"
    inside.mkdir()
    outside.mkdir()
    (inside / "image-1.png").write_bytes(PNG)
    (outside / "image-2.png").write_bytes(PNG)
    lines = "\n".join(
        LINE.format(n=n, path=path)
        for n, path in ((1, inside / "image-1.png"), (2, outside / "image-2.png"))
    )
    views = image_views(f"Look.\n\n{lines}", [str(inside)])
    assert views is not None
    ok, refused = views.planner.tools
    assert ok.exit_code == 0 and ok.output.startswith(f"{len(PNG)} bytes, sha256 ")
    assert refused.exit_code == 1 and "outside every --add-dir folder" in refused.output
    assert views.summary.endswith("image-2.png: not viewable")
    assert image_views("no images here", [str(inside)]) is None
