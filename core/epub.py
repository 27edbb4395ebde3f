"""EPUB input: chapters from the spine, titled from the table of contents (EPUB 2 or 3).

An EPUB is a zip of XHTML files listed by an OPF package; zipfile and ElementTree read the
structure and BeautifulSoup the text. (EbookLib does the same but is AGPL-licensed, which a
self-hosted Apache-2.0 service should not pull in.)
"""

import io
import posixpath
import zipfile
from typing import Any
from xml.etree import ElementTree

from bs4 import BeautifulSoup

NS = {"c": "urn:oasis:names:tc:opendocument:xmlns:container",
      "opf": "http://www.idpf.org/2007/opf", "ncx": "http://www.daisy.org/z3986/2005/ncx/",
      "xhtml": "http://www.w3.org/1999/xhtml", "epub": "http://www.idpf.org/2007/ops"}
BLOCKS = ["p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "blockquote", "pre", "dd", "dt"]
MAX_UNCOMPRESSED = 200 * 1024 * 1024  # refuse zip bombs


class BadEpub(ValueError):
    """The upload is not a readable EPUB; the message says why."""


def _xml(book: zipfile.ZipFile, name: str) -> ElementTree.Element:
    return ElementTree.fromstring(book.read(name))


def _titles(book: zipfile.ZipFile, manifest: dict[str, dict[str, str]],
            package: ElementTree.Element) -> dict[str, str]:
    """Map document paths to titles from the EPUB 3 nav or the EPUB 2 NCX."""
    titles: dict[str, str] = {}
    nav = next((i for i in manifest.values() if "nav" in i.get("properties", "").split()), None)
    if nav is not None:
        root = _xml(book, nav["path"])
        base = posixpath.dirname(nav["path"])
        for link in root.iter(f"{{{NS['xhtml']}}}a"):
            href, text = link.get("href", ""), "".join(link.itertext()).strip()
            if href and text:
                titles.setdefault(posixpath.normpath(posixpath.join(base, href.split("#")[0])),
                                  text)
    toc = package.find("opf:spine", NS)
    ncx_id = toc.get("toc") if toc is not None else None
    if ncx_id and ncx_id in manifest:
        root = _xml(book, manifest[ncx_id]["path"])
        base = posixpath.dirname(manifest[ncx_id]["path"])
        for point in root.iter(f"{{{NS['ncx']}}}navPoint"):
            label = point.find("ncx:navLabel/ncx:text", NS)
            content = point.find("ncx:content", NS)
            if label is not None and content is not None and label.text:
                src = content.get("src", "").split("#")[0]
                titles.setdefault(posixpath.normpath(posixpath.join(base, src)),
                                  label.text.strip())
    return titles


def _text(xhtml: bytes) -> tuple[str, str | None]:
    """Return the readable text of a document (paragraphs apart) and its first heading."""
    soup = BeautifulSoup(xhtml, "html.parser")
    for tag in soup(["script", "style", "head"]):
        tag.decompose()
    heading = soup.find(["h1", "h2"])
    blocks = [b.get_text(" ", strip=True) for b in soup.find_all(BLOCKS)
              if not b.find_parent(BLOCKS)]
    text = "\n\n".join(b for b in blocks if b) or soup.get_text(" ", strip=True)
    return text, heading.get_text(" ", strip=True) if heading else None


def chapters(data: bytes) -> list[dict[str, Any]]:
    """Return one chapter per spine document that has text, in reading order."""
    try:
        book = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise BadEpub("file: not an EPUB (not a zip archive)") from exc
    with book:
        if sum(i.file_size for i in book.infolist()) > MAX_UNCOMPRESSED:
            raise BadEpub("file: the EPUB unpacks to more than 200 MB")
        try:
            container = _xml(book, "META-INF/container.xml")
            rootfile = container.find("c:rootfiles/c:rootfile", NS)
            opf = rootfile.get("full-path", "") if rootfile is not None else ""
            package = _xml(book, opf)
        except (KeyError, ElementTree.ParseError) as exc:
            raise BadEpub(f"file: not a readable EPUB ({exc})") from exc
        folder = posixpath.dirname(opf)
        manifest = {
            item.get("id", ""): {"path": posixpath.normpath(posixpath.join(folder,
                                                                             item.get("href", ""))),
                                 "type": item.get("media-type", ""),
                                 "properties": item.get("properties", "")}
            for item in package.iterfind("opf:manifest/opf:item", NS)}
        titles = _titles(book, manifest, package)
        result = []
        for ref in package.iterfind("opf:spine/opf:itemref", NS):
            item = manifest.get(ref.get("idref", ""))
            if item is None or "html" not in item["type"] or \
                    "nav" in item["properties"].split():
                continue
            text, heading = _text(book.read(item["path"]))
            if text.strip():
                result.append({"title": titles.get(item["path"]) or heading, "input": text})
    if not result:
        raise BadEpub("file: the EPUB has no readable text")
    return result
