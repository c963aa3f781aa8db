"""Image and depth codecs for depthserve, built on numpy and Pillow only (never torch)."""

from depthserve.codec.depth_in import check_depth_shape, decode_depth, depth_size
from depthserve.codec.errors import (
    CodecError,
    DepthShapeMismatch,
    ExtremeAspectRatio,
    ImageTooLarge,
    InvalidArray,
    InvalidDepth,
    InvalidIntrinsics,
    ReplyTooLarge,
    UndecodableImage,
    UnsupportedFormat,
    UnsupportedImageMode,
)
from depthserve.codec.formats import DEFAULT_FORMAT, OUTPUT_FORMATS, format_from_accept
from depthserve.codec.images import decode_image, image_size
from depthserve.codec.intrinsics import check_intrinsics, parse_intrinsics
from depthserve.codec.limits import (
    DEFAULT_MAX_ASPECT_RATIO,
    DEFAULT_MAX_NPY_ELEMENTS,
    DEFAULT_MAX_PIXELS,
    check_image_size,
    check_same_size,
)
from depthserve.codec.npy import decode_npy, encode_npy
from depthserve.codec.ply import encode_ply
from depthserve.codec.png16 import encode_png16_mm
from depthserve.codec.preview import encode_preview_png
from depthserve.codec.reply_size import check_encoded_reply, check_reply_size, reply_bytes

__all__ = [
    "DEFAULT_FORMAT",
    "DEFAULT_MAX_ASPECT_RATIO",
    "DEFAULT_MAX_NPY_ELEMENTS",
    "DEFAULT_MAX_PIXELS",
    "OUTPUT_FORMATS",
    "CodecError",
    "DepthShapeMismatch",
    "ExtremeAspectRatio",
    "ImageTooLarge",
    "InvalidArray",
    "InvalidDepth",
    "InvalidIntrinsics",
    "ReplyTooLarge",
    "UndecodableImage",
    "UnsupportedFormat",
    "UnsupportedImageMode",
    "check_depth_shape",
    "check_encoded_reply",
    "check_image_size",
    "check_intrinsics",
    "check_reply_size",
    "check_same_size",
    "decode_depth",
    "decode_image",
    "decode_npy",
    "depth_size",
    "encode_npy",
    "encode_ply",
    "encode_png16_mm",
    "encode_preview_png",
    "format_from_accept",
    "image_size",
    "parse_intrinsics",
    "reply_bytes",
]
