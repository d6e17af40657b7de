"""`trl-ragen2 data webshop`: original files downloaded from a local HTTP server (127.0.0.1) or imported, converted
into the loader's format, cached, and loadable; the 1k conversion reproduces the project's copy exactly."""

import gzip
import json

import pytest

from trl_ragen2 import cli
from trl_ragen2_envs.webshop.catalog import download as download_module
from trl_ragen2_envs.webshop.catalog import nouns as nouns_module
from trl_ragen2_envs.webshop.catalog.download import DATASET_FILES
from trl_ragen2_envs.webshop.catalog.prepare import (
    SMALL_DOCS_FILE,
    SOURCES_FILE,
    default_data_dir,
    prepare_webshop_data,
    prepared_data_dir,
    webshop_record,
)
from trl_ragen2_envs.webshop.data import load_shop

from .webshop_data import DATA_DIR, needs_data
from .webshop_originals import FileServer, original_files, raw_records_from_docs, sha256, stub_tagger


NUM_PRODUCTS = 40


@pytest.fixture
def originals():
    return original_files(NUM_PRODUCTS)  # ({name: bytes}, {product name: nouns})


@pytest.fixture
def published(monkeypatch, originals):
    """Publish the small test files' sizes and digests in place of WebShop's (as if they were the real ones)."""
    contents, _ = originals
    for name, data in contents.items():
        monkeypatch.setitem(download_module.PUBLISHED_FILES, name, (len(data), sha256(data)))
    return contents


@pytest.fixture
def no_spacy_needed(monkeypatch, originals):
    """The CLI's default noun tagger replaced by the generator's known nouns (spaCy is tested on the 1k set)."""
    monkeypatch.setattr(nouns_module, "spacy_batch_noun_tagger", lambda: stub_tagger(originals[1]))


# ---------------------------------------------------------------------------------------------------------------
# Location


def test_default_folder_is_under_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TRL_RAGEN2_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_data_dir("small") == tmp_path / "xdg" / "trl_ragen2" / "webshop-data" / "small"
    monkeypatch.setenv("TRL_RAGEN2_CACHE", str(tmp_path / "mine"))
    assert default_data_dir("all") == tmp_path / "mine" / "webshop-data" / "all"
    assert prepared_data_dir("small") is None  # nothing prepared yet
    with pytest.raises(ValueError, match="dataset='full' is not a WebShop data set"):
        default_data_dir("full")


# ---------------------------------------------------------------------------------------------------------------
# Download and convert


def test_small_set_downloaded_converted_and_loadable(tmp_path, originals):
    contents, nouns = originals
    out = tmp_path / "small"
    with FileServer(contents) as server:
        files = [server.remote(name) for name in DATASET_FILES["small"]]
        result = prepare_webshop_data("small", out, files=files, tagger=stub_tagger(nouns))
    assert result.num_products == NUM_PRODUCTS and result.notes == []  # the repeated and the invalid ASIN dropped
    sources = json.loads((out / SOURCES_FILE).read_text())
    for name, data in contents.items():
        assert sources["files"][name] == {
            "origin": f"{server.url}/{name}",
            "bytes": len(data),
            "sha256": sha256(data),
            "check": "matches the published SHA-256",
        }
    assert sources["files"]["name_type_tokens_stub.json"]["by"] == "stub tagger 1.0"
    shop = load_shop(data_dir=str(out), cache_dir=False)
    assert shop.name == "webshop-small-1k" and len(shop.products) == NUM_PRODUCTS
    raw = json.loads(contents["items_shuffle_1000.json"])
    first = shop.by_asin[raw[0]["asin"]]
    assert first.query == raw[0]["query"].lower() and first.pricing[0] == float(raw[0]["pricing"].split("$")[1])
    assert shop.nouns.get(first.asin, first.title) == tuple(nouns[first.title])
    human = load_shop(data_dir=str(out), cache_dir=False, goals="human")
    assert len(human.goals) == 3  # the three products with human instructions


def test_all_set_keeps_the_raw_products_and_adds_the_nouns(tmp_path):
    contents, nouns = original_files(NUM_PRODUCTS, dataset="all")
    out = tmp_path / "all"
    with FileServer(contents) as server:
        files = [server.remote(name) for name in DATASET_FILES["all"]]
        result = prepare_webshop_data("all", out, files=files, tagger=stub_tagger(nouns))
    assert result.num_products == NUM_PRODUCTS
    assert not (out / SMALL_DOCS_FILE).exists()
    shop = load_shop(data_dir=str(out), cache_dir=False)
    assert shop.name == "webshop-full" and len(shop.products) == NUM_PRODUCTS
    assert shop.nouns.covers(p.asin for p in shop.products)  # no spaCy needed at training time


def test_a_prepared_folder_is_kept_unless_forced(tmp_path, originals):
    contents, nouns = originals
    with FileServer(contents) as server:
        files = [server.remote(name) for name in DATASET_FILES["small"]]
        prepare_webshop_data("small", tmp_path, files=files, tagger=stub_tagger(nouns))
        again = prepare_webshop_data("small", tmp_path, files=files, tagger=stub_tagger(nouns))
        assert again.already_prepared and len(server.requests) == 3
        forced = prepare_webshop_data("small", tmp_path, files=files, force=True, tagger=stub_tagger(nouns))
        assert not forced.already_prepared and len(server.requests) == 3  # the originals are checked, not fetched
        assert all(entry.get("check", "matches").startswith("matches") for entry in forced.files.values())


def test_missing_spacy_fails_before_anything_is_downloaded(tmp_path, monkeypatch, originals):
    def missing():
        raise ImportError(
            'tagging product names needs spaCy and an English model: pip install "trl-ragen2[webshop-data]"'
        )

    monkeypatch.setattr(nouns_module, "spacy_batch_noun_tagger", missing)
    with FileServer(originals[0]) as server:
        files = [server.remote(name) for name in DATASET_FILES["small"]]
        with pytest.raises(ImportError, match=r"trl-ragen2\[webshop-data\]"):
            prepare_webshop_data("small", tmp_path / "out", files=files)
        assert server.requests == []


# ---------------------------------------------------------------------------------------------------------------
# Import


def test_import_from_a_webshop_checkout_records_the_checks(tmp_path, published, originals):
    checkout = tmp_path / "WebShop"
    (checkout / "data").mkdir(parents=True)
    for name, data in published.items():
        (checkout / "data" / name).write_bytes(data)
    (checkout / "data" / "items_human_ins.json").write_bytes(b"{}")  # a modified file
    result = prepare_webshop_data("small", tmp_path / "out", source_dir=checkout, tagger=stub_tagger(originals[1]))
    assert result.files["items_shuffle_1000.json"]["check"] == "matches the published SHA-256"
    assert (
        result.files["items_shuffle_1000.json"]["origin"]
        == f"imported from {checkout / 'data' / 'items_shuffle_1000.json'}"
    )
    assert result.files["items_human_ins.json"]["check"].startswith("differs from the published file")
    assert result.notes == [f"items_human_ins.json {result.files['items_human_ins.json']['check']}"]
    assert load_shop(data_dir=str(tmp_path / "out"), cache_dir=False).name == "webshop-small-1k"


def test_import_links_large_files_instead_of_copying_them(tmp_path, monkeypatch, originals):
    from trl_ragen2_envs.webshop.catalog import prepare as prepare_module

    contents, nouns = originals
    source = tmp_path / "src"
    source.mkdir()
    for name, data in contents.items():
        (source / name).write_bytes(data)
    monkeypatch.setattr(prepare_module, "LINK_ABOVE_BYTES", 10_000)  # as a 5 GB file would be
    prepare_webshop_data("small", tmp_path / "out", source_dir=source, tagger=stub_tagger(nouns))
    products, attributes = tmp_path / "out" / "items_shuffle_1000.json", tmp_path / "out" / "items_ins_v2_1000.json"
    assert products.stat().st_size > 10_000 and products.samefile(source / products.name)  # one file, two names
    assert attributes.stat().st_size < 10_000 and not attributes.samefile(source / attributes.name)  # a copy


def test_import_names_the_missing_files(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(FileNotFoundError, match=r"lacks \['items_shuffle.json', 'items_ins_v2.json'\]"):
        prepare_webshop_data("all", tmp_path / "out", source_dir=tmp_path / "src", tagger=stub_tagger({}))
    with pytest.raises(FileNotFoundError, match="not a folder"):
        prepare_webshop_data("small", tmp_path / "out", source_dir=tmp_path / "nowhere", tagger=stub_tagger({}))


# ---------------------------------------------------------------------------------------------------------------
# The command


def test_command_downloads_into_the_cache_and_the_recipe_location_finds_it(
    tmp_path, monkeypatch, capsys, published, no_spacy_needed
):
    monkeypatch.setenv("TRL_RAGEN2_CACHE", str(tmp_path / "cache"))
    with FileServer(published) as server:
        assert cli.main(["data", "webshop", "small", "--mirror", server.url]) == 0
        out = capsys.readouterr().out
        folder = tmp_path / "cache" / "webshop-data" / "small"
        assert f"WebShop small set ready in {folder}: {NUM_PRODUCTS:,} products" in out
        assert out.count("matches the published SHA-256") == 3
        assert "The WebShop recipe reads it by default" in out
        assert prepared_data_dir("small") == folder
        assert cli.main(["data", "webshop", "small", "--mirror", server.url]) == 0
        assert "already prepared" in capsys.readouterr().out and len(server.requests) == 3


def test_command_reports_a_checksum_mismatch(tmp_path, monkeypatch, capsys, published, no_spacy_needed):
    monkeypatch.setitem(download_module.PUBLISHED_FILES, "items_ins_v2_1000.json", (None, "f" * 64))
    with FileServer(published) as server:
        assert cli.main(["data", "webshop", "small", "--mirror", server.url, "--to", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "trl-ragen2 data webshop: error: items_ins_v2_1000.json has SHA-256" in err
    assert f"but the published file has {'f' * 64}" in err and "--from DIR" in err
    assert not (tmp_path / "out" / SOURCES_FILE).exists()  # not taken for a prepared folder


def test_command_rejects_from_together_with_mirror(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["data", "webshop", "small", "--from", "x", "--mirror", "http://127.0.0.1:1"])
    assert exit_info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# The 1k catalogue: WebShop's processing of the raw records, reproduced


@pytest.fixture(scope="module")
def docs_1k():
    with gzip.open(DATA_DIR / SMALL_DOCS_FILE, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@needs_data
def test_loader_rules_rebuild_every_processed_1k_record(docs_1k):
    attributes = json.loads((DATA_DIR / "items_ins_v2_1000.json").read_text())
    raw, human = raw_records_from_docs(docs_1k)
    for record, doc in zip(raw, docs_1k, strict=True):
        rebuilt = webshop_record(record, attributes, human)
        assert rebuilt == doc["product"] and list(rebuilt) == list(doc["product"])  # values and key order


def write_1k_originals(folder, docs):
    """The 1k set in WebShop's download format: raw records rebuilt from the processed ones, the attribute file."""
    raw, human = raw_records_from_docs(docs)
    folder.mkdir()
    (folder / "items_shuffle_1000.json").write_text(json.dumps(raw))
    (folder / "items_ins_v2_1000.json").write_bytes((DATA_DIR / "items_ins_v2_1000.json").read_bytes())
    (folder / "items_human_ins.json").write_text(json.dumps(human))
    return folder


@needs_data
def test_conversion_of_the_1k_originals_gives_the_projects_catalogue(tmp_path, docs_1k):
    reference_nouns = json.loads((DATA_DIR / "name_type_tokens_spacy38.json").read_text())
    tagger = stub_tagger({doc["product"]["name"]: reference_nouns[doc["id"]] for doc in docs_1k})
    source = write_1k_originals(tmp_path / "originals", docs_1k)
    result = prepare_webshop_data("small", tmp_path / "out", source_dir=source, tagger=tagger)
    assert result.num_products == 1000
    with gzip.open(tmp_path / "out" / SMALL_DOCS_FILE, "rt", encoding="utf-8") as handle:
        assert [json.loads(line) for line in handle] == docs_1k  # id, search text and every product field
    shop = load_shop(data_dir=str(tmp_path / "out"), cache_dir=False)
    assert shop.name == "webshop-small-1k" and len(shop.goals) == 6910  # RAGEN's synthetic goal count


@needs_data
def test_spacy_nouns_of_the_1k_names_are_the_projects_noun_file(tmp_path, docs_1k):
    try:
        tagger = nouns_module.spacy_batch_noun_tagger()
    except ImportError as error:
        pytest.skip(f"no spaCy English model: {error}")
    source = write_1k_originals(tmp_path / "originals", docs_1k)
    result = prepare_webshop_data("small", tmp_path / "out", source_dir=source, tagger=tagger)
    assert result.files["name_type_tokens_spacy38.json"]["by"].startswith("spaCy 3.8")
    reference = (DATA_DIR / "name_type_tokens_spacy38.json").read_bytes()
    assert (tmp_path / "out" / "name_type_tokens_spacy38.json").read_bytes() == reference  # byte for byte
