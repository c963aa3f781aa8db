"""A /v1/depth upload as the gateway received it: files still in the pieces they arrived in, options parsed.

Kept in pieces so the one copy made of a large image is the one into the gRPC message (`wire`);
`inputs` joins them for paths that need whole files (the job queue).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthserve.codec import CodecError, image_size
from depthserve.codec.reply_size import reply_bytes
from depthserve.protocol.depth_api import DEPTH, IMAGE, DepthInputs
from depthserve.protocol.infer_wire import WireRequest, depth_request_wire


def _join(pieces: list[bytes]) -> bytes:
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


@dataclass(frozen=True)
class DepthUpload:
    """The image (and optional depth PNG) as received pieces, with the request's options."""

    image: list[bytes]
    depth: list[bytes] | None
    intrinsics: np.ndarray | None
    resolution_level: int
    output_format: str

    def _options(self, image: bytes, depth: bytes | None) -> DepthInputs:
        return DepthInputs(
            image=image,
            depth=depth,
            intrinsics=self.intrinsics,
            resolution_level=self.resolution_level,
            output_format=self.output_format,
        )

    def inputs(self) -> DepthInputs:
        """The upload as DepthInputs, files joined."""
        return self._options(_join(self.image), None if self.depth is None else _join(self.depth))

    def reply_bytes(self) -> int:
        """About how many bytes the reply will take, from the image header (0 when only encoding tells)."""
        try:
            width, height = image_size(self.image[0])
        except CodecError:
            return 0
        return reply_bytes(width, height, self.output_format, self.intrinsics is not None) or 0

    def wire(self, model: str, request_id: str) -> WireRequest:
        """The ModelInferRequest for a worker, serialized with the files copied once, straight from their pieces."""
        files = {IMAGE: self.image} if self.depth is None else {IMAGE: self.image, DEPTH: self.depth}
        placeholders = self._options(b"", None if self.depth is None else b"")
        return depth_request_wire(model, placeholders, request_id, files)
