"""`trl-ragen2 data webshop {small,all}`: the original WebShop files, downloaded or imported, made ready to load.

**Where.** `default_data_dir(dataset)` is `<cache>/webshop-data/<dataset>` (`trl_ragen2_envs.cache`), unless
`out_dir` is given. `prepared_data_dir(dataset)` returns the folder once `sources.json` is there, which is written
last, so a run that stopped half way is never mistaken for a prepared one.

**What the folder holds.**

- the original files, as WebShop's `setup.sh -d small|all` saves them (`download.py`): the products, the
  attributes with the synthetic instructions, and the human instructions;
- `small` only: `webshop_small_1k_docs.jsonl.gz`, one `{id, contents, product}` record per product, which is what
  WebShop's loader (`engine.load_products`, with human goals) and its index builder
  (`search_engine/convert_product_file_format.py`) produce: `product` is the raw record with the loader's fields
  added, `contents` the lower-cased text its search index holds. The data loader (`../data.py`) reads this file in
  place of the raw products; `all` keeps the raw `items_shuffle.json`, which the loader streams;
- `name_type_tokens_spacy<version>.json`: the NOUN/PROPN tokens of every product name (`nouns.py`), so the reward
  needs no spaCy at training time;
- `sources.json`: where each file came from, its size and SHA-256, and whether that digest matched the published
  one.

`--from DIR` imports originals the user already has (a folder with the files, or a WebShop checkout whose `data/`
holds them) instead of downloading; their digests are compared with the published ones and the result is
recorded. A folder already in the loader's 1k layout (`webshop_small_1k_docs.jsonl.gz` and
`items_ins_v2_1000.json`) is copied as it is.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...cache import cache_root
from ..data import SMALL_DOCS_FILE
from .download import (
    DATASET_FILES,
    PUBLISHED_FILES,
    ChecksumError,
    Downloaded,
    Progress,
    RemoteFile,
    check_published,
    download,
    file_sha256,
    remote_files,
)
from .jsonstream import iter_json_array, iter_json_object
from .products import PLACEHOLDER_ATTRIBUTE, is_valid_asin, normalize_option_value, options_text, parse_pricing


DATA_FOLDER = "webshop-data"
SOURCES_FILE = "sources.json"
LINK_ABOVE_BYTES = 1 << 30
# raw keys WebShop's loader drops before use (engine.clean_product_keys)
DROPPED_RAW_KEYS = (
    "product_information", "brand", "brand_url", "list_price", "availability_quantity", "availability_status",
    "total_reviews", "total_answered_questions", "seller_id", "seller_name", "fulfilled_by_amazon",
    "fast_track_message", "aplus_present", "small_description_old",
)  # fmt: skip

BatchTagger = Callable[[Iterable[str]], Iterator[list[str]]]


@dataclass
class PreparedData:
    """The outcome of `prepare_webshop_data`: the folder, what is in it, and anything the user should know."""

    folder: Path
    dataset: str
    num_products: int = 0
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    already_prepared: bool = False


def default_data_dir(dataset: str) -> Path:
    """`<cache>/webshop-data/<dataset>`: where `trl-ragen2 data webshop <dataset>` prepares the data by default."""
    _check_dataset(dataset)
    return cache_root() / DATA_FOLDER / dataset


def prepared_data_dir(dataset: str = "small") -> Path | None:
    """The cache folder prepared by `trl-ragen2 data webshop <dataset>`, or None when that has not run."""
    folder = default_data_dir(dataset)
    return folder if (folder / SOURCES_FILE).is_file() else None


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASET_FILES:
        raise ValueError(f"dataset={dataset!r} is not a WebShop data set; choose one of {sorted(DATASET_FILES)}")


# ---------------------------------------------------------------------------------------------------------------
# WebShop's loader rules, on one raw record


def webshop_record(raw: dict[str, Any], attributes: dict[str, Any], human: dict[str, Any]) -> dict[str, Any]:
    """The product record WebShop's `load_products` makes of a raw one (human goals on): the raw fields, less
    `DROPPED_RAW_KEYS`, plus Title, Description, Reviews, Rating, BulletPoints, pricing (numbers), Price,
    options, option_to_image, Attributes, instructions (when the product has human instructions) and MainImage,
    with the query lower-cased."""
    asin = raw["asin"]
    record = {key: value for key, value in raw.items() if key not in DROPPED_RAW_KEYS}
    record["Title"] = raw.get("name")
    record["Description"] = raw.get("full_description")
    record["Reviews"] = []
    record["Rating"] = "N.A."
    bullets = raw.get("small_description")
    record["BulletPoints"] = bullets if isinstance(bullets, list) else [bullets]
    pricing, price_text = parse_pricing(raw.get("pricing"))
    record["pricing"] = list(pricing)
    record["Price"] = price_text
    options: dict[str, list[str]] = {}
    option_to_image: dict[str, Any] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents is None:
            continue
        values = []
        for content in contents:
            value = normalize_option_value(str(content["value"]))
            values.append(value)
            option_to_image[value] = content.get("image")
        options[name.lower()] = values
    record["options"], record["option_to_image"] = options, option_to_image
    entry = attributes.get(asin)
    record["Attributes"] = (
        entry["attributes"] if isinstance(entry, dict) and "attributes" in entry else [PLACEHOLDER_ATTRIBUTE]
    )
    if asin in human:
        record["instructions"] = human[asin]
    record["MainImage"] = (raw.get("images") or [""])[0]
    record["query"] = str(raw.get("query", "")).lower().strip()
    return record


def search_document(record: dict[str, Any]) -> dict[str, Any]:
    """`{id, contents, product}` as WebShop's index builder writes it: the title, description, first bullet point
    and options, lower-cased."""
    bullets = record["BulletPoints"] or [""]
    parts = [record["Title"] or "", record["Description"] or "", bullets[0] or "", options_text(record["options"])]
    return {"id": record["asin"], "contents": " ".join(parts).lower(), "product": record}


def unique_raw_products(path: Path) -> Iterator[dict[str, Any]]:
    """The raw records of a products file that WebShop keeps: valid ASINs, first occurrence only."""
    seen: set[str] = set()
    for record in iter_json_array(path):
        asin = record.get("asin") if isinstance(record, dict) else None
        if is_valid_asin(asin) and asin not in seen:
            seen.add(asin)
            yield record


# ---------------------------------------------------------------------------------------------------------------
# Writers (each writes a temporary file and renames it, so a stopped run leaves no half file under the real name)


def write_docs(products: Path, attributes: Path, human: Path | None, out: Path) -> int:
    """Write the `{id, contents, product}` records of every kept product to `out` (gzipped JSON Lines)."""
    attribute_entries = dict(iter_json_object(attributes))
    human_entries = dict(iter_json_object(human)) if human is not None else {}
    tmp = out.with_name(out.name + ".tmp")
    count = 0
    with open(tmp, "wb") as raw_handle, gzip.GzipFile(fileobj=raw_handle, mode="wb", mtime=0) as handle:
        for raw in unique_raw_products(products):
            record = webshop_record(raw, attribute_entries, human_entries)
            handle.write((json.dumps(search_document(record)) + "\n").encode("utf-8"))
            count += 1
    tmp.replace(out)
    return count


def write_nouns(
    products: Path, out: Path, tag_all: BatchTagger, progress: Progress | None = None, total: int | None = None
) -> int:
    """Write `{asin: nouns of its name}` for every kept product to `out`, streaming (the full set holds 1.18 M);
    `progress` gets `("title nouns", done, total)` every 1,000 products."""
    asins: list[str] = []

    def names() -> Iterator[str]:
        for raw in unique_raw_products(products):
            asins.append(raw["asin"])
            yield str(raw.get("name") or "")

    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write("{")
        for index, nouns in enumerate(tag_all(names())):
            handle.write(("" if index == 0 else ", ") + f"{json.dumps(asins[index])}: {json.dumps(nouns)}")
            if progress and (index + 1) % 1000 == 0:
                progress("title nouns", index + 1, total)
        handle.write("}")
    if progress:
        progress("title nouns", len(asins), len(asins))
    tmp.replace(out)
    return len(asins)


def _publish_status(remote: RemoteFile, size: int, sha256: str) -> str:
    if remote.sha256 is None:
        return "no published SHA-256 to compare with: recorded"
    try:
        check_published(remote, size, sha256)
    except ChecksumError as error:
        return f"differs from the published file: {error}"
    return "matches the published SHA-256"


# ---------------------------------------------------------------------------------------------------------------
# Getting the originals


def _link_or_copy(source: Path, target: Path) -> None:
    """Copy `source` to `target`; a file over 1 GB is hard-linked when the file system allows (no second 5 GB)."""
    if target.exists() and source.resolve() == target.resolve():
        return
    tmp = target.with_name(target.name + ".tmp")
    tmp.unlink(missing_ok=True)
    linked = False
    if source.stat().st_size >= LINK_ABOVE_BYTES:
        try:
            os.link(source, tmp)
            linked = True
        except OSError:  # another file system, or no hard links: copy
            pass
    if not linked:
        shutil.copyfile(source, tmp)
    tmp.replace(target)


def find_originals(source_dir: Path, names: Iterable[str]) -> dict[str, Path]:
    """Where each of `names` is in `source_dir` (or in its `data/`, as in a WebShop checkout); missing ones left out."""
    found = {}
    for name in names:
        for candidate in (source_dir / name, source_dir / "data" / name):
            if candidate.is_file():
                found[name] = candidate
                break
    return found


def _import_originals(dataset: str, source_dir: Path, folder: Path, result: PreparedData) -> None:
    products, attributes, human = DATASET_FILES[dataset]
    found = find_originals(source_dir, DATASET_FILES[dataset])
    missing = [name for name in (products, attributes) if name not in found]
    if missing:
        raise FileNotFoundError(
            f"--from {source_dir} lacks {missing} (looked in the folder and in its data/); give the folder holding "
            f"WebShop's {dataset!r} files ({', '.join(DATASET_FILES[dataset])})"
        )
    if human not in found:
        result.notes.append(f"{human} not found in {source_dir}: goals='human' will not be available")
    for name, path in found.items():
        _link_or_copy(path, folder / name)
        size, digest = path.stat().st_size, file_sha256(folder / name)
        remote = RemoteFile(name, str(path), *PUBLISHED_FILES[name])
        status = _publish_status(remote, size, digest)
        if status.startswith("differs"):
            result.notes.append(f"{name} {status}")
        result.files[name] = {"origin": f"imported from {path}", "bytes": size, "sha256": digest, "check": status}


def _import_loader_layout(source_dir: Path, folder: Path, result: PreparedData) -> None:
    """Copy a folder already in the loader's 1k layout (docs, attributes, nouns, human instructions)."""
    names = [SMALL_DOCS_FILE, "items_ins_v2_1000.json", DATASET_FILES["small"][2]]
    names += sorted(p.name for p in source_dir.glob("name_type_tokens*.json"))
    for name in names:
        if (source_dir / name).is_file():
            _link_or_copy(source_dir / name, folder / name)
            size, digest = (folder / name).stat().st_size, file_sha256(folder / name)
            entry = {"origin": f"imported from {source_dir / name}", "bytes": size, "sha256": digest}
            if name in PUBLISHED_FILES:
                entry["check"] = _publish_status(RemoteFile(name, "", *PUBLISHED_FILES[name]), size, digest)
            result.files[name] = entry
    with gzip.open(folder / SMALL_DOCS_FILE, "rt", encoding="utf-8") as handle:
        result.num_products = sum(1 for line in handle if line.strip())
    if not any(name.startswith("name_type_tokens") for name in result.files):
        result.notes.append("no name_type_tokens*.json in the imported folder: the reward will tag names with spaCy")


# ---------------------------------------------------------------------------------------------------------------
# The command


def prepare_webshop_data(
    dataset: str,
    out_dir: str | os.PathLike | None = None,
    *,
    source_dir: str | os.PathLike | None = None,
    mirror: str | None = None,
    files: list[RemoteFile] | None = None,
    force: bool = False,
    progress: Progress | None = None,
    tagger: tuple[BatchTagger, str] | None = None,
) -> PreparedData:
    """Download (or import from `source_dir`) and convert WebShop's `dataset` ("small" or "all") into `out_dir`.

    Args:
        dataset: `"small"` (1,000 products) or `"all"` (1.18 M products), as in WebShop's `setup.sh -d`.
        out_dir: Where to prepare the data; default `default_data_dir(dataset)`.
        source_dir: A folder with the original files, imported instead of downloading.
        mirror: A base URL serving the same files as `<mirror>/<name>`, instead of Google Drive.
        files: The files to download (default `remote_files(dataset, mirror)`).
        force: Prepare again even when the folder is already prepared.
        progress: Called with `(task, done, total)`: bytes per downloaded file, then products for the nouns.
        tagger: `(tag_all, description)` for the title nouns; default spaCy (`nouns.spacy_batch_noun_tagger`).
    """
    _check_dataset(dataset)
    folder = Path(out_dir).expanduser() if out_dir is not None else default_data_dir(dataset)
    result = PreparedData(folder=folder, dataset=dataset)
    if (folder / SOURCES_FILE).is_file() and not force:
        result.already_prepared = True
        return result
    source = Path(source_dir).expanduser() if source_dir is not None else None
    if source is not None and not source.is_dir():
        raise FileNotFoundError(f"--from {source}: not a folder; give the folder holding the WebShop files")
    loader_layout = source is not None and dataset == "small" and (source / SMALL_DOCS_FILE).is_file()
    if tagger is None and not loader_layout:
        from .nouns import spacy_batch_noun_tagger

        tagger = spacy_batch_noun_tagger()  # before any download: a missing spaCy fails now, with the fix
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SOURCES_FILE).unlink(missing_ok=True)

    if loader_layout:
        _import_loader_layout(source, folder, result)
    else:
        if source is not None:
            _import_originals(dataset, source, folder, result)
        else:
            for remote in files if files is not None else remote_files(dataset, mirror):
                got: Downloaded = download(remote, folder, progress=progress)
                result.files[remote.name] = {
                    "origin": remote.url,
                    "bytes": got.size,
                    "sha256": got.sha256,
                    "check": _publish_status(remote, got.size, got.sha256),
                }
        _convert(dataset, folder, result, tagger, progress)

    sources = {"dataset": dataset, "products": result.num_products, "files": result.files, "notes": result.notes}
    tmp = folder / (SOURCES_FILE + ".tmp")
    tmp.write_text(json.dumps(sources, indent=2) + "\n", encoding="utf-8")
    tmp.replace(folder / SOURCES_FILE)
    return result


def _convert(dataset: str, folder: Path, result: PreparedData, tagger, progress: Progress | None) -> None:
    products, attributes, human = (folder / name for name in DATASET_FILES[dataset])
    made_from = [products.name, attributes.name] + ([human.name] if human.exists() else [])
    if dataset == "small":
        docs = folder / SMALL_DOCS_FILE
        result.num_products = write_docs(products, attributes, human if human.exists() else None, docs)
        result.files[SMALL_DOCS_FILE] = _made_file(docs, made_from, "WebShop's loader and index-builder rules")
    tag_all, description = tagger
    nouns_file = folder / f"name_type_tokens_{_tagger_tag(description)}.json"
    for stale in folder.glob("name_type_tokens*.json"):
        stale.unlink()
    count = write_nouns(products, nouns_file, tag_all, progress, total=result.num_products or None)
    result.num_products = result.num_products or count
    result.files[nouns_file.name] = _made_file(nouns_file, [products.name], description)


def _made_file(path: Path, made_from: list[str], how: str) -> dict[str, Any]:
    return {"made_from": made_from, "by": how, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _tagger_tag(description: str) -> str:
    """`spacy38` for "spaCy 3.8.18, ..." (as the 1k noun file is named), else the description's first word."""
    words = description.replace(",", " ").split() or ["tagger"]
    if words[0].lower() == "spacy" and len(words) > 1:
        return "spacy" + "".join(words[1].split(".")[:2])
    return "".join(c for c in words[0].lower() if c.isalnum()) or "tagger"
