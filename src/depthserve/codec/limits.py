"""Size limits shared by the decoders, so one number bounds memory per request."""

# 40 MP: a 48 MP phone photo must be downscaled by the client; anything bigger is refused
# from its header, before a single pixel is decoded.
DEFAULT_MAX_PIXELS = 40_000_000

# A generic .npy may hold HxWx3 points, so allow three values per pixel.
DEFAULT_MAX_NPY_ELEMENTS = 3 * DEFAULT_MAX_PIXELS
