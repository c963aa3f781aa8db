"""Errors raised by the codec; every message is written to be shown to a client unchanged."""


class CodecError(ValueError):
    """Signal bad client input so the gateway can answer 4xx with the message as-is."""


class UndecodableImage(CodecError):
    """Signal bytes that are empty, truncated, corrupt or not an allowed image format."""


class UnsupportedImageMode(CodecError):
    """Signal an image whose pixel mode cannot be an RGB input (e.g. a 16-bit depth map)."""


class ImageTooLarge(CodecError):
    """Signal an image or array whose header claims more pixels than allowed."""


class ExtremeAspectRatio(CodecError):
    """Signal an image far wider than tall (or the reverse), whose token grid would cost without bound."""


class DepthShapeMismatch(CodecError):
    """Signal a depth map whose size differs from the RGB image it goes with."""


class InvalidIntrinsics(CodecError):
    """Signal camera intrinsics that cannot be parsed or are physically impossible."""


class InvalidDepth(CodecError):
    """Signal a depth upload in the wrong format, dtype or shape."""


class InvalidArray(CodecError):
    """Signal an .npy payload that is malformed, truncated, too large or not plain numbers."""


class UnsupportedFormat(CodecError):
    """Signal an output format (query parameter or Accept header) the server cannot produce."""


class ReplyTooLarge(CodecError):
    """Signal a reply that would exceed the largest message a worker may send; no retry can help."""
