"""Issue 36 item 4: a file the product cannot write because of where it is (a full disk, no
permission) is one `StorageError` line naming the path, with its errno, from every writer of
the product's own files (results, the response cache, the warehouse); other errors pass
through unchanged. Real failures only: /dev/full, sysfs (no file may be created there, not
even by root) and a 1 MiB tmpfs where this process may mount one."""

import errno
import subprocess
import uuid
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd
import pytest

from llm_assets.data.writers import write_table
from resources.engine import Response
from resources.response_cache import ResponseCache
from resources.storage import StorageError, storage_guard
from resources.warehouse.store import WarehouseIOManager

SYSFS = Path("/sys")


DENIED = (errno.EACCES, errno.EPERM)  # sysfs: EACCES for a file, EPERM for a folder


def one_line(error: StorageError, path, number: int | tuple[int, ...], reason: str) -> str:
    message = str(error)
    assert "\n" not in message and str(path) in message and reason in message, message
    numbers = number if isinstance(number, tuple) else (number,)
    assert error.errno in numbers and isinstance(error, OSError)
    return message


def response(text: str) -> Response:
    return Response(
        id="r", text=text, prompt_tokens=1, cached_tokens=0, output_tokens=1, ttft_s=0.0,
        finish_s=0.0,
    )  # fmt: skip


def unwritable_dir() -> Path:
    if not SYSFS.is_dir():
        pytest.skip("no /sys here (not Linux): no folder that refuses every writer")
    return SYSFS / f"llm-assets-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs filled to the last byte."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()[:80]})")
    try:
        with open(mount / "filler", "wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_device_is_one_line_with_its_errno(tmp_path):
    with pytest.raises(StorageError) as caught:
        with storage_guard(tmp_path / "x.csv", "the result file"), open("/dev/full", "wb") as f:
            f.write(b"a")
            f.flush()
    one_line(caught.value, tmp_path / "x.csv", errno.ENOSPC, "No space left on device")


def test_other_errors_pass_through_unchanged(tmp_path):
    for error in (FileNotFoundError(errno.ENOENT, "gone"), ValueError("bad"), KeyError("k")):
        with pytest.raises(type(error)) as caught, storage_guard(tmp_path, "x"):
            raise error
        assert caught.value is error
    with pytest.raises(duckdb.CatalogException), storage_guard(tmp_path, "x"):
        duckdb.connect().execute("SELECT * FROM no_such_table")


def test_results_the_cache_and_the_warehouse_refuse_an_unwritable_folder_in_one_line():
    folder = unwritable_dir()
    with pytest.raises(StorageError) as caught:
        write_table(pd.DataFrame({"a": [1]}), folder.with_suffix(".csv"))
    one_line(caught.value, folder.with_suffix(".csv"), DENIED, "the result file")
    cache = ResponseCache(folder / "responses.duckdb")
    with pytest.raises(StorageError) as caught:
        cache.put_many([("k", response("t"))])
    one_line(caught.value, cache.path, DENIED, "the response cache")
    warehouse = WarehouseIOManager(database=str(folder / "warehouse.duckdb"))
    context = dg.build_output_context(asset_key=dg.AssetKey("a"), run_id="r1")
    with pytest.raises(StorageError) as caught:
        warehouse.handle_output(context, pd.DataFrame({"a": [1]}))
    one_line(caught.value, folder / "warehouse.duckdb", DENIED, "the warehouse")


def test_a_full_disk_under_a_result_is_one_line_and_leaves_no_part_file(full_disk):
    target = full_disk / "result.csv"
    with pytest.raises(StorageError) as caught:
        write_table(pd.DataFrame({"a": ["x" * 1000] * 5000}), target)
    one_line(caught.value, target, errno.ENOSPC, "No space left on device")
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


def test_a_full_disk_under_the_response_cache_is_one_line(full_disk):
    cache = ResponseCache(full_disk / "home" / "responses.duckdb")
    rows = [(f"k{i}", response("t" * 200))
            for i in range(5000)]  # fmt: skip
    with pytest.raises(StorageError) as caught:
        cache.put_many(rows)
    one_line(caught.value, cache.path, errno.ENOSPC, "the response cache")
