"""The image file formats the library reads, told by their leading bytes: one table.

Both readers of encoded images ask `FORMATS`: the image-folder scan
(`simclr_tf.data.image_scan`: every row) and the exported `serving_default`
(`simclr_tf.weights.serving_input`: the rows `tf.io.decode_image` reads, `tf_decodes`).
`tf.io.decode_image` reads JPEG, PNG, BMP and GIF (first frame); Pillow reads the other
rows, for image folders only (a served image must be one TensorFlow decodes in the
graph). Pure Python: no TensorFlow.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ImageFormat:
    """One row of `FORMATS`.

    Attributes:
      name: lower-case id, as the folder scan records (and caches) it.
      label: the name error messages show.
      magics: the leading bytes of the format's files (any one of them).
      extensions: file name endings an image folder lists as this format.
      tf_decodes: `tf.io.decode_image` reads it (else Pillow does).
      end_marker: bytes among the last of every complete file, or None where the
        format has no such marker.
      then: (offset, bytes) that must also be at `offset`, or None: WebP is a RIFF
        container whose type, at byte 8, is WEBP. A format `tf_decodes` needs none
        (the serving graph tells formats by their prefix alone).
    """
    name: str
    label: str
    magics: tuple[bytes, ...]
    extensions: tuple[str, ...]
    tf_decodes: bool
    end_marker: bytes | None = None
    then: tuple[int, bytes] | None = None

    def matches(self, head: bytes) -> bool:
        """Whether a file starting with `head` (its first 12 bytes or more) is one."""
        if not any(head.startswith(magic) for magic in self.magics):
            return False
        if self.then is None:
            return True
        offset, expected = self.then
        return head[offset:offset + len(expected)] == expected


FORMATS = (
    ImageFormat("jpeg", "JPEG", (b"\xff\xd8\xff",), (".jpg", ".jpeg"), True,
                end_marker=b"\xff\xd9"),
    ImageFormat("png", "PNG", (b"\x89PNG\r\n\x1a\n",), (".png",), True,
                end_marker=b"IEND"),
    ImageFormat("bmp", "BMP", (b"BM",), (".bmp",), True),
    ImageFormat("gif", "GIF", (b"GIF87a", b"GIF89a"), (".gif",), True,
                end_marker=b"\x3b"),
    ImageFormat("tiff", "TIFF", (b"II*\x00", b"MM\x00*"), (".tif", ".tiff"), False),
    ImageFormat("webp", "WebP", (b"RIFF",), (".webp",), False, then=(8, b"WEBP")),
    ImageFormat("pnm", "PNM", (b"P5", b"P6", b"P2", b"P3"), (".ppm", ".pgm"), False),
)

# The rows tf.io.decode_image reads: the formats `serving_default` accepts.
TF_FORMATS = tuple(row for row in FORMATS if row.tf_decodes)
TF_FORMAT_NAMES = tuple(row.name for row in TF_FORMATS)
# What an image folder lists, in the order of the table.
EXTENSIONS = tuple(extension for row in FORMATS for extension in row.extensions)


def format_of(head: bytes) -> ImageFormat | None:
    """The row whose magic bytes `head` (a file's first bytes) starts with, or None."""
    for row in FORMATS:
        if row.matches(head):
            return row
    return None
