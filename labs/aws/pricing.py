"""What the lab costs while it exists: on-demand list-price estimates, itemised.

GPU nodes are the big line, but the EKS control plane, the NAT gateway, the system
nodes and their disks bill by the hour too, which is why a study week ends with a
full teardown. Prices are estimates gathered in 2026 (some from third-party tables);
the AWS Price List API has current ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from labs.errors import LabError

HOURS_PER_MONTH = 730
FALLBACK_REGION = "us-east-1"
EKS_CONTROL_PLANE_PER_HOUR = 0.10  # standard support; extended support is 0.60
ESTIMATE_NOTE = (
    "estimates from on-demand list prices gathered in 2026 (some third-party); "
    "data transfer and NAT data processing not included"
)
# USD per hour for instances and the NAT gateway; USD per GB-month for gp3 volumes.
PRICES: dict[str, dict[str, float]] = {
    "us-east-1": {
        "g5.xlarge": 1.006,
        "t3.medium": 0.0416,
        "nat_gateway": 0.045,
        "gp3_gb_month": 0.08,
    },
    "us-west-2": {
        "g5.xlarge": 1.006,
        "t3.medium": 0.0416,
        "nat_gateway": 0.045,
        "gp3_gb_month": 0.08,
    },
    "ap-northeast-2": {
        "g5.xlarge": 1.237,
        "t3.medium": 0.052,
        "nat_gateway": 0.059,
        "gp3_gb_month": 0.0912,
    },
    "eu-west-1": {
        "g5.xlarge": 1.123,
        "t3.medium": 0.0456,
        "nat_gateway": 0.048,
        "gp3_gb_month": 0.088,
    },
}


class PricingError(LabError, ValueError):
    """No price on file for what was asked."""


@dataclass(frozen=True)
class CostItem:
    """One billed thing: `hourly` is None when its price is not on file."""

    label: str
    quantity: float
    unit_price: float | None
    unit: str
    hourly: float | None


@dataclass(frozen=True)
class CostEstimate:
    region: str
    price_region: str
    items: tuple[CostItem, ...]
    notes: tuple[str, ...]

    @property
    def total_hourly(self) -> float:
        """Sum of the items with a known price (a lower bound when some are unknown)."""
        return sum(item.hourly for item in self.items if item.hourly is not None)

    def as_dict(self) -> dict[str, Any]:
        """Plain values for JSON reports and status views, with the total."""
        fields = asdict(self)
        return {**fields, "items": list(fields["items"]), "notes": list(self.notes),
                "total": self.total_hourly}  # fmt: skip

    def lines(self) -> list[str]:
        """A printable, itemised estimate."""
        lines = [f"Estimated cost in {self.region} (USD, on-demand):"]
        for item in self.items:
            price = "price unknown" if item.hourly is None else f"${item.hourly:.3f}/h"
            unit = "?" if item.unit_price is None else f"{item.unit_price:g}"
            rate = f"{item.quantity:g} x {unit} {item.unit}"
            lines.append(f"  {item.label:<28} {rate:<30} {price:>13}")
        lines.append(f"  {'total':<59} {f'${self.total_hourly:.3f}/h':>13}")
        return lines + [f"  note: {note}" for note in self.notes]


def estimate_hourly_cost(
    region: str,
    gpu_nodes: int,
    system_nodes: int,
    *,
    gpu_instance_type: str = "g5.xlarge",
    system_instance_type: str = "t3.medium",
    gpu_disk_gb: int = 100,
    system_disk_gb: int = 30,
    nat_gateways: int = 1,
) -> CostEstimate:
    """The lab's hourly cost with `gpu_nodes` GPU and `system_nodes` system nodes running."""
    prices, price_region = _prices_for(region)
    notes = [ESTIMATE_NOTE]
    if price_region != region:
        notes.append(f"no prices on file for {region}; showing {price_region} prices")

    def item(label: str, quantity: float, key: str, *, per_month: bool = False) -> CostItem:
        unit = "per GB-month" if per_month else "per hour"
        unit_price = prices.get(key)
        if unit_price is None:
            notes.append(f"no price on file for {key}; the total leaves it out")
            return CostItem(label, quantity, None, unit, None)
        hourly = quantity * unit_price / (HOURS_PER_MONTH if per_month else 1)
        return CostItem(label, quantity, unit_price, unit, hourly)

    control_plane = EKS_CONTROL_PLANE_PER_HOUR
    disk_gb = gpu_nodes * gpu_disk_gb + system_nodes * system_disk_gb
    items = (
        CostItem("EKS control plane", 1, control_plane, "per hour", control_plane),
        item("NAT gateway", nat_gateways, "nat_gateway"),
        item(f"system nodes ({system_instance_type})", system_nodes, system_instance_type),
        item(f"GPU nodes ({gpu_instance_type})", gpu_nodes, gpu_instance_type),
        item("EBS gp3 node disks (GB)", disk_gb, "gp3_gb_month", per_month=True),
    )
    return CostEstimate(region, price_region, items, tuple(notes))


def gpu_node_minutes_cost(region: str, instance_type: str, minutes: float) -> float:
    """What `minutes` of one GPU node cost (us-east-1 prices for regions not on file)."""
    prices, price_region = _prices_for(region)
    if instance_type not in prices:
        raise PricingError(
            f"no price on file for {instance_type} in {price_region}; "
            f"known: {', '.join(sorted(key for key in prices if '.' in key))}"
        )
    return prices[instance_type] * minutes / 60


def _prices_for(region: str) -> tuple[dict[str, float], str]:
    if region in PRICES:
        return PRICES[region], region
    return PRICES[FALLBACK_REGION], FALLBACK_REGION
