"""How many workers a model pool wants: one pure rule, an HPA-like stabiliser and a rate meter, shared by
the gateway, `depthserve up --autoscale` and the simulator, so all three scale by exactly the same rule."""

from depthserve.scaling.rate import RateMeter
from depthserve.scaling.rule import PoolLoad, ScalingPolicy, demand, recommend
from depthserve.scaling.stabiliser import Stabiliser

__all__ = ["PoolLoad", "RateMeter", "ScalingPolicy", "Stabiliser", "demand", "recommend"]
