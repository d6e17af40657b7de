"""WebShop's original files: the published sources, and the resumable, checksum-verified download, tested against
a local HTTP server on 127.0.0.1 (never the internet)."""

import pytest

from trl_ragen2_envs.webshop.catalog import download as download_module
from trl_ragen2_envs.webshop.catalog.download import (
    DATASET_FILES,
    GOOGLE_DRIVE_IDS,
    ChecksumError,
    DownloadError,
    download,
    remote_files,
)

from .webshop_originals import FileServer, original_files, sha256


@pytest.fixture
def server():
    contents, _ = original_files(num_products=40)
    with FileServer(contents) as running:
        yield running


PRODUCTS = DATASET_FILES["small"][0]


# ---------------------------------------------------------------------------------------------------------------
# Sources


def test_sources_are_the_google_drive_files_of_webshops_setup_script():
    # the gdown ids of princeton-nlp/WebShop's setup.sh (64fa2a5), one per file it saves
    assert GOOGLE_DRIVE_IDS["items_shuffle_1000.json"] == "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib"
    assert GOOGLE_DRIVE_IDS["items_ins_v2_1000.json"] == "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu"
    assert GOOGLE_DRIVE_IDS["items_shuffle.json"] == "1A2whVgOO0euk5O13n2iYDM0bQRkkRduB"
    assert GOOGLE_DRIVE_IDS["items_ins_v2.json"] == "1s2j6NgHljiZzQNL3veZaAiyW_qDEgBNi"
    assert GOOGLE_DRIVE_IDS["items_human_ins.json"] == "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O"
    small = remote_files("small")
    assert [f.name for f in small] == ["items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json"]
    assert small[0].url == (
        "https://drive.usercontent.google.com/download?id=1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib&export=download&confirm=t"
    )
    assert all(f.size and f.sha256 and len(f.sha256) == 64 for f in remote_files("all"))
    # the same files from a mirror, with the same published sizes and digests
    mirrored = remote_files("all", mirror="http://127.0.0.1:1/webshop/")
    assert [f.url for f in mirrored] == [f"http://127.0.0.1:1/webshop/{name}" for name in DATASET_FILES["all"]]
    assert [(f.size, f.sha256) for f in mirrored] == [(f.size, f.sha256) for f in remote_files("all")]
    with pytest.raises(ValueError, match="dataset='tiny' is not a WebShop data set; choose one of"):
        remote_files("tiny")


def test_published_digest_of_the_1k_attribute_file_matches_the_copy_provided_with_the_project():
    from .webshop_data import DATA_DIR, HAS_1K_CATALOGUE

    if not HAS_1K_CATALOGUE:
        pytest.skip("WEBSHOP_DATA_DIR holds no 1k WebShop catalogue")
    data = (DATA_DIR / "items_ins_v2_1000.json").read_bytes()
    assert (len(data), sha256(data)) == download_module.PUBLISHED_FILES["items_ins_v2_1000.json"]


# ---------------------------------------------------------------------------------------------------------------
# Download


def test_download_verifies_and_reports_progress(server, tmp_path):
    seen = []
    got = download(server.remote(PRODUCTS), tmp_path, progress=lambda name, done, total: seen.append((done, total)))
    data = server.files[PRODUCTS]
    assert got.path.read_bytes() == data and got.sha256 == sha256(data) and got.verified and got.fetched
    assert got.resumed_from == 0 and not (tmp_path / f"{PRODUCTS}.part").exists()
    assert seen[0] == (0, len(data)) and seen[-1] == (len(data), len(data))
    assert server.requests == [(f"/{PRODUCTS}", None)]


def test_interrupted_download_resumes_with_a_range_request(server, tmp_path):
    data = server.files[PRODUCTS]
    server.cut_after = 5000  # the connection drops after 5,000 of the file's bytes
    with pytest.raises(DownloadError, match=f"stopped after 5,000 of {len(data):,} bytes; run the command again"):
        download(server.remote(PRODUCTS), tmp_path)
    assert (tmp_path / f"{PRODUCTS}.part").read_bytes() == data[:5000]
    got = download(server.remote(PRODUCTS), tmp_path)
    assert server.requests[-1] == (f"/{PRODUCTS}", "bytes=5000-")  # only the rest was asked for
    assert got.resumed_from == 5000 and got.verified and got.path.read_bytes() == data


def test_a_server_ignoring_range_sends_the_whole_file_again(server, tmp_path):
    data = server.files[PRODUCTS]
    (tmp_path / f"{PRODUCTS}.part").write_bytes(b"X" * 100)  # not even a prefix of the file
    server.honour_range = False
    got = download(server.remote(PRODUCTS), tmp_path)
    assert server.requests[-1] == (f"/{PRODUCTS}", "bytes=100-")
    assert got.path.read_bytes() == data and got.verified  # restarted from byte 0, digest of the new bytes only


def test_checksum_mismatch_deletes_the_download_and_names_the_fix(server, tmp_path):
    data = server.files[PRODUCTS]
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as error:
        download(server.remote(PRODUCTS, digest=wrong), tmp_path)
    message = str(error.value)
    assert f"{PRODUCTS} has SHA-256 {sha256(data)}, but the published file has {wrong}" in message
    assert "--from DIR" in message and "--mirror" in message
    assert list(tmp_path.iterdir()) == []  # neither a part nor a file under the real name


def test_a_resumed_download_whose_first_part_was_corrupted_fails_the_checksum(server, tmp_path):
    data = server.files[PRODUCTS]
    (tmp_path / f"{PRODUCTS}.part").write_bytes(b"{" + data[1:4000])  # a wrong first byte, then a true prefix
    with pytest.raises(ChecksumError, match="has SHA-256"):
        download(server.remote(PRODUCTS), tmp_path)
    assert server.requests[-1] == (f"/{PRODUCTS}", "bytes=4000-")
    assert not (tmp_path / f"{PRODUCTS}.part").exists()
    assert download(server.remote(PRODUCTS), tmp_path).path.read_bytes() == data  # the next attempt starts afresh


def test_size_announced_by_the_server_is_checked_before_any_byte_is_kept(server, tmp_path):
    with pytest.raises(ChecksumError, match=r"serves [\d,]+ bytes for items_shuffle_1000.json, but the published"):
        download(server.remote(PRODUCTS, size=123), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_unknown_digest_is_recorded_not_verified(server, tmp_path):
    got = download(server.remote(PRODUCTS, size=None, digest=None), tmp_path)
    assert not got.verified and got.sha256 == sha256(server.files[PRODUCTS])


def test_a_complete_file_is_checked_and_not_fetched_again(server, tmp_path):
    download(server.remote(PRODUCTS), tmp_path)
    again = download(server.remote(PRODUCTS), tmp_path)
    assert not again.fetched and again.verified and len(server.requests) == 1
    (tmp_path / PRODUCTS).write_bytes(b"[]")
    with pytest.raises(ChecksumError, match="is already there but differs.*delete it to download again"):
        download(server.remote(PRODUCTS), tmp_path)


def test_web_page_instead_of_the_file_is_refused(server, tmp_path):
    server.content_type = "text/html; charset=utf-8"  # what Google Drive sends when a file's quota is used up
    with pytest.raises(DownloadError, match="sent a web page instead of items_shuffle_1000.json.*--from DIR"):
        download(server.remote(PRODUCTS), tmp_path)


def test_http_errors_and_unreachable_hosts_name_the_address(server, tmp_path):
    missing = server.remote(PRODUCTS)
    missing = type(missing)("items_ins_v2.json", f"{server.url}/items_ins_v2.json")
    with pytest.raises(DownloadError, match=r"answered HTTP 404 .* for items_ins_v2.json"):
        download(missing, tmp_path)
    closed = type(missing)("x.json", "http://127.0.0.1:9/x.json")  # the discard port: nothing listens
    with pytest.raises(DownloadError, match=r"could not reach http://127.0.0.1:9/x.json .*--from DIR"):
        download(closed, tmp_path, timeout=5)
