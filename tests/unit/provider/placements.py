"""A provider's placement (node selector and tolerations) as its ResourceOffer states it."""

from __future__ import annotations

from catamaran.provider.offers import Placement


def placement(selector=None, tolerations=()) -> Placement:
    return Placement.from_offer_spec({"nodeSelector": selector or {}, "tolerations": list(tolerations)})
