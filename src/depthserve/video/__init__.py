"""Depth for every frame of a video: decoded with PyAV off the event loop, frames fanned out one inference
each, results reassembled in frame order and streamed out as a zip of 16-bit PNGs, an .npz stack or an
H.264 preview.

The package never imports the gateway: the one inference per frame is a callable passed in
(`pipeline.InferFrame`), so the gateway supplies its dispatch path (admission, balancing, retries,
hedging, deadlines) and tests can supply anything.
"""
