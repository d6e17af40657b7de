"""Small WebShop data files in the original download format, and a local HTTP server (127.0.0.1) that serves them.

`write_original_files` writes the three files of WebShop's `setup.sh -d small` (or `-d all`) for a few procedural
products: raw records as WebShop scraped them (`name`, `full_description`, `small_description`, `pricing` text,
`customization_options` with values and images, plus raw keys WebShop's loader drops), the attribute file with
synthetic instructions, and human instructions for three products. `raw_records_from_docs` turns the processed 1k
records back into raw ones (the loader's added fields removed, the price as text).

`FileServer` serves bytes by name, with switches for what real servers do: honour `Range` or ignore it, cut the
connection part way through a response, answer with a web page. It records every request's path and `Range`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from trl_ragen2_envs.webshop.catalog import generation as catalog_gen
from trl_ragen2_envs.webshop.catalog.download import DATASET_FILES, RemoteFile


# fields WebShop's loader adds to a raw record (engine.load_products), removed to get the raw record back
LOADER_FIELDS = ("Title", "Description", "Reviews", "Rating", "BulletPoints", "Price", "options", "option_to_image",
                 "Attributes", "instructions", "MainImage")  # fmt: skip


def original_files(num_products: int = 40, dataset: str = "small") -> tuple[dict[str, bytes], dict[str, list[str]]]:
    """`({file name: bytes}, {product name: nouns})` for `num_products` procedural products in WebShop's format."""
    generated = catalog_gen.generate_catalog(num_products, seed=3)
    raw, attributes, human, nouns = [], {}, {}, {}
    for index, product in enumerate(generated.products):
        options = {
            name.title(): [
                {"value": value.title(), "image": f"https://example.invalid/{product.asin}/{i}.jpg"}
                for i, value in enumerate(values)
            ]  # fmt: skip
            for name, values in product.options.items()
        }
        raw.append(
            {
                "name": product.title,
                "full_description": product.description,
                "pricing": " - ".join(f"${price}" for price in product.pricing),
                "images": [f"https://example.invalid/{product.asin}.jpg"],
                "product_category": product.product_category,
                "small_description": list(product.bullet_points),
                "customization_options": options or "",
                "asin": product.asin,
                "category": product.category,
                "query": product.query.upper(),  # the loader lower-cases it
                "brand": "dropped by the loader",
                "page": index // 10,
            }
        )
        entry = {"attributes": list(product.attributes)}
        if product.asin in generated.instructions:
            text, instruction_attributes = generated.instructions[product.asin]
            entry.update(instruction=text, instruction_attributes=instruction_attributes)
        attributes[product.asin] = entry
        nouns[product.title] = generated.nouns[product.asin]
    for product in generated.products[:3]:
        human[product.asin] = [
            {"asin": product.asin, "instruction": f"i want {product.query}.",
             "instruction_attributes": list(product.attributes[:1]), "instruction_options": []}
        ]  # fmt: skip
    raw.append(dict(raw[0]))  # a repeated ASIN: WebShop keeps the first
    raw.append({**raw[1], "asin": "nan"})  # an invalid ASIN: WebShop skips it
    products_file, attributes_file, human_file = DATASET_FILES[dataset]
    contents = {
        products_file: json.dumps(raw, indent=1).encode(),
        attributes_file: json.dumps(attributes).encode(),
        human_file: json.dumps(human).encode(),
    }
    return contents, nouns


def write_original_files(folder: Path, num_products: int = 40, dataset: str = "small") -> dict[str, list[str]]:
    """Write `original_files` into `folder`; returns `{product name: nouns}`."""
    folder.mkdir(parents=True, exist_ok=True)
    contents, nouns = original_files(num_products, dataset)
    for name, data in contents.items():
        (folder / name).write_bytes(data)
    return nouns


def stub_tagger(nouns_by_name: dict[str, list[str]]):
    """A `(tag_all, description)` tagger that looks the nouns up by product name (the generator knows them)."""

    def tag_all(names):
        for name in names:
            yield list(nouns_by_name[name])

    return tag_all, "stub tagger 1.0"


def raw_records_from_docs(docs: list[dict]) -> tuple[list[dict], dict[str, list]]:
    """`(raw records, human instructions by ASIN)` of processed `{id, contents, product}` records."""
    raw, human = [], {}
    for doc in docs:
        product = doc["product"]
        record = {key: value for key, value in product.items() if key not in LOADER_FIELDS}
        record["pricing"] = " - ".join(f"${price}" for price in product["pricing"])
        raw.append(record)
        if "instructions" in product:
            human[product["asin"]] = product["instructions"]
    return raw, human


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FileServer:
    """An HTTP server on 127.0.0.1 serving `files` (name -> bytes) at `/<name>`; use as a context manager.

    Attributes that change its behaviour: `honour_range` (answer `Range` with 206, else send the whole file with
    200), `cut_after` (bytes after which the next response is cut off, once), `content_type`.
    """

    def __init__(self, files: dict[str, bytes]):
        self.files = dict(files)
        self.honour_range = True
        self.cut_after: int | None = None
        self.content_type = "application/octet-stream"
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                data = server.files.get(self.path.lstrip("/"))
                if data is None:
                    self.send_error(404, "Not Found")
                    return
                start = 0
                range_header = self.headers.get("Range")
                if range_header and server.honour_range:
                    start = int(range_header.removeprefix("bytes=").rstrip("-"))
                    if start >= len(data):
                        self.send_error(416, "Range Not Satisfiable")
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Type", server.content_type)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if server.cut_after is not None:
                    body, server.cut_after = body[: server.cut_after], None
                    self.close_connection = True
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def remote(self, name: str, *, size: int | None = -1, digest: str | None = "") -> RemoteFile:
        """A `RemoteFile` for `name` on this server, with its true size and SHA-256 unless others are given."""
        data = self.files[name]
        return RemoteFile(
            name,
            f"{self.url}/{name}",
            len(data) if size == -1 else size,
            sha256(data) if digest == "" else digest,
        )

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)
