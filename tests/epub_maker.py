"""Build small EPUB files for tests (EPUB 3 with a nav document, or EPUB 2 with an NCX)."""

import io
import zipfile


def make_epub(chapters: list[tuple[str, str]], version: int = 3) -> bytes:
    """Return an EPUB whose spine holds one XHTML document per (title, paragraph text)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr("META-INF/container.xml", (
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>'))
        items, refs, links, points = [], [], [], []
        for n, (title, text) in enumerate(chapters):
            body = "".join(f"<p>{p}</p>" for p in text.split("\n\n"))
            book.writestr(f"OEBPS/text/ch{n}.xhtml", (
                '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><head>'
                f"<title>x</title><style>p {{}}</style></head><body><h1>{title}</h1>{body}"
                "<script>ignored()</script></body></html>"))
            items.append(f'<item id="c{n}" href="text/ch{n}.xhtml" '
                         'media-type="application/xhtml+xml"/>')
            refs.append(f'<itemref idref="c{n}"/>')
            links.append(f'<li><a href="text/ch{n}.xhtml">{title} (toc)</a></li>')
            points.append(f'<navPoint id="p{n}"><navLabel><text>{title} (toc)</text>'
                          f'</navLabel><content src="text/ch{n}.xhtml"/></navPoint>')
        if version == 3:
            book.writestr("OEBPS/nav.xhtml", (
                '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml" '
                'xmlns:epub="http://www.idpf.org/2007/ops"><body><nav epub:type="toc"><ol>'
                + "".join(links) + "</ol></nav></body></html>"))
            items.append('<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" '
                         'properties="nav"/>')
            spine = "<spine>"
        else:
            book.writestr("OEBPS/toc.ncx", (
                '<?xml version="1.0"?><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" '
                'version="2005-1"><navMap>' + "".join(points) + "</navMap></ncx>"))
            items.append('<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>')
            spine = '<spine toc="ncx">'
        book.writestr("OEBPS/content.opf", (
            f'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" '
            f'version="{version}.0"><metadata/><manifest>' + "".join(items)
            + "</manifest>" + spine + "".join(refs) + "</spine></package>"))
    return buffer.getvalue()
