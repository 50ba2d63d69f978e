"""The GPU time limit: AWS scales a lab's GPU nodes to 0 when its TTL runs out.

`lab.down` guards cost only if someone runs it; a laptop that sleeps or a VPN that drops
leaves GPUs billing. So before GPUs are asked for, lab.up and lab.scale N>0 set (or move)
a one-time schedule in the lab's own account that scales the GPU node group to 0 `ttl`
from now on the lab's clock; lab.scale 0 and lab.down delete it; lab.extend moves it.
The lab's record keeps when it fires, so status can tell a countdown from a limit that
has expired after the schedule deleted itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from labs.aws import stack
from labs.aws.schedules import delete_gpu_time_limit, put_gpu_time_limit, read_gpu_time_limit
from labs.console import Console
from labs.errors import LabError
from labs.guard import check_lab_target
from labs.lab import Lab
from labs.settings import TTL_OFF, LabSettings

# Lab record keys: when the schedule fires (ISO, the lab's clock) and the ttl last set.
FIRES_AT = "gpu_ttl_at"
TTL_SET = "gpu_ttl"
ROLE_OUTPUT = "gpu_ttl_scheduler_role_arn"
SCHEDULE_OUTPUT = "gpu_ttl_schedule_name"


class TimeLimitError(LabError):
    """The GPU time limit could not be set as asked; the message says what to do."""


@dataclass(frozen=True)
class TimeLimit:
    """Where a lab's limit stands: running (time left), expired, overdue (expired, GPUs still
    asked for), missing (no schedule though one should be there), off or none."""

    state: str
    fires_at: datetime | None = None
    left: timedelta | None = None


def confirm_off(settings: LabSettings, gpus: int, confirm: Callable[[str], bool]) -> None:
    """`--ttl off` leaves only lab.down between GPUs and the bill: ask before anything changes."""
    if gpus == 0 or settings.gpu_ttl is not None:
        return
    question = (
        f"Run {gpus} GPU node(s) of lab {settings.lab!r} with NO time limit? Nothing in AWS "
        "will stop them; only `invoke lab.down` will."
    )
    if not confirm(question):
        raise TimeLimitError(
            "nothing changed: --ttl off needs a confirmation (answer y, or pass --yes); "
            "or keep a limit, e.g. --ttl 90m"
        )


def plan(settings: LabSettings) -> str:
    """What lab.up --dry-run says about the limit it would set."""
    if settings.gpu_ttl is None:
        return "would ask before running GPUs with no time limit (--ttl off)"
    name = stack.gpu_ttl_schedule_name(settings.lab)
    return (
        f"would first call scheduler.create_schedule(Name={name!r}, ScheduleExpression="
        f"'at(now + {settings.ttl})', ActionAfterCompletion='DELETE'), target "
        f"eks:updateNodegroupConfig desiredSize 0"
    )


def arm(lab: Lab, max_size: int, console: Console, keep_later: bool = False) -> None:
    """Set or move the schedule to now + ttl (or remove it when ttl is off), before GPUs bill.

    `keep_later`: no --ttl was given, so a running limit set later (lab.extend --ttl 168h)
    stays: scaling must not cut short a session someone chose to make long.
    """
    ttl = lab.settings.gpu_ttl
    scheduler, name = lab.aws_client("scheduler"), _schedule_name(lab)
    if ttl is None:
        delete_gpu_time_limit(scheduler, name, stack.GPU_TTL_SCHEDULE_GROUP)
        lab.update(**{FIRES_AT: None, TTL_SET: TTL_OFF})
        console.say("    GPU time limit: off (confirmed); only `invoke lab.down` stops these GPUs")
        return
    role = lab.outputs.get(ROLE_OUTPUT)
    if not role:
        raise TimeLimitError(
            f"lab {lab.name!r} has no GPU time-limit role in its stack outputs (applied before "
            f"the stack had one); run `invoke lab.up --lab {lab.name}` to apply it"
        )
    fires_at = (lab.backend.now(lab) + ttl).replace(microsecond=0)
    cluster, nodegroup = lab.cluster_name, lab.gpu_node_group
    kept = _later_limit(lab, fires_at) if keep_later else None
    if kept is not None:
        console.say(
            f"    GPU time limit kept: AWS scales {nodegroup} to 0 at {_utc(kept)}, later than "
            f"{lab.settings.ttl} from now (--ttl {lab.settings.ttl} would move it there)"
        )
        return
    created = put_gpu_time_limit(
        scheduler, name=name, group=stack.GPU_TTL_SCHEDULE_GROUP, at=fires_at, cluster=cluster,
        nodegroup=nodegroup, max_size=max_size, role_arn=str(role),
    )  # fmt: skip
    lab.update(**{FIRES_AT: fires_at.isoformat(), TTL_SET: lab.settings.ttl})
    console.say(
        f"    GPU time limit {'set' if created else 'moved'}: AWS scales {nodegroup} to 0 at "
        f"{_utc(fires_at)} ({lab.settings.ttl} from now on the lab's clock; schedule {name})"
    )


def _later_limit(lab: Lab, fires_at: datetime) -> datetime | None:
    """When the lab's running schedule fires, if that is after `fires_at`; else None."""
    if lab.record.get(TTL_SET) == TTL_OFF or not lab.record.get(FIRES_AT):
        return None
    at = read_gpu_time_limit(
        lab.aws_client("scheduler"), _schedule_name(lab), stack.GPU_TTL_SCHEDULE_GROUP
    )
    return at if at is not None and at > fires_at else None


def disarm(lab: Lab, console: Console) -> None:
    """Delete the schedule once the GPUs are at 0, so it cannot cut a later session short."""
    removed = delete_gpu_time_limit(
        lab.aws_client("scheduler"), _schedule_name(lab), stack.GPU_TTL_SCHEDULE_GROUP
    )
    if lab.record.get(FIRES_AT) or lab.record.get(TTL_SET):
        lab.update(**{FIRES_AT: None, TTL_SET: None})
    if removed:
        console.say(f"GPU time limit removed (schedule {_schedule_name(lab)} deleted)")


def extend(lab: Lab, console: Console, confirm: Callable[[str], bool]) -> None:
    """lab.extend: move the limit to now + ttl while GPU nodes run (`confirm` asks for off)."""
    from labs.aws.cloud import describe_gpu_nodegroup

    lab.backend.check_writable(lab, "lab.extend")
    check_lab_target(lab, cluster=False, account=True)
    group = describe_gpu_nodegroup(lab.aws_client("eks"), lab.cluster_name, lab.gpu_node_group)
    if not group["desired_size"]:
        raise TimeLimitError(
            f"no GPU node runs in lab {lab.name!r} (desired size 0), so there is nothing to "
            f"limit; `invoke lab.scale N --lab {lab.name}` sets a limit with the GPUs"
        )
    confirm_off(lab.settings, int(group["desired_size"]), confirm)
    with console.phase(f"GPU time limit of lab {lab.name!r}"):
        arm(lab, int(group["max_size"]), console)


def read(lab: Lab, desired: int | None = None) -> TimeLimit:
    """The limit as recorded, checked against the lab's clock and the schedule in AWS;
    `desired`: the GPU group's desiredSize when the caller has just read it."""
    if lab.record.get(TTL_SET) == TTL_OFF:
        return TimeLimit("off")
    recorded = lab.record.get(FIRES_AT)
    if not recorded:
        return TimeLimit("none")
    now = lab.backend.now(lab)
    fires_at = datetime.fromisoformat(recorded)
    if fires_at <= now:
        if desired is None:
            from labs.aws.cloud import describe_gpu_nodegroup

            eks, group = lab.aws_client("eks"), lab.gpu_node_group
            desired = describe_gpu_nodegroup(eks, lab.cluster_name, group)["desired_size"]
        return TimeLimit("overdue" if desired else "expired", fires_at)
    at = read_gpu_time_limit(
        lab.aws_client("scheduler"), _schedule_name(lab), stack.GPU_TTL_SCHEDULE_GROUP
    )
    if at is None:
        return TimeLimit("missing", fires_at)
    return TimeLimit("running", at, at - now)


def describe(limit: TimeLimit, lab: Lab) -> str:
    """One line for lab.status and lab.list."""
    if limit.state == "running" and limit.fires_at and limit.left is not None:
        return (
            f"{_duration(limit.left)} left (GPU nodes to 0 at {_utc(limit.fires_at)}"
            f"{_clock_note(lab, limit.left)})"
        )
    if limit.state == "expired" and limit.fires_at:
        return f"expired at {_utc(limit.fires_at)}: the schedule scaled the GPU nodes to 0"
    if limit.state == "overdue" and limit.fires_at:
        return (
            f"expired at {_utc(limit.fires_at)} but GPU nodes are still asked for: the schedule "
            f"has not scaled them (yet); `invoke lab.down --lab {lab.name}` stops them"
        )
    if limit.state == "missing":
        return (
            f"MISSING: schedule {_schedule_name(lab)} is gone though GPUs may run; set it "
            f"again with `invoke lab.extend --lab {lab.name}`"
        )
    if limit.state == "off":
        return "off: nothing but `invoke lab.down` stops the GPU nodes"
    return "none (no GPU session)"


def brief(limit: TimeLimit) -> str:
    """A few words for a table: `3h58m left`, `expired`, `off`, `none`, `MISSING`."""
    if limit.state == "running" and limit.left is not None:
        return f"{_duration(limit.left)} left"
    return "MISSING" if limit.state == "missing" else limit.state


def _schedule_name(lab: Lab) -> str:
    return str(lab.outputs.get(SCHEDULE_OUTPUT) or stack.gpu_ttl_schedule_name(lab.cluster_name))


def _utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _clock_note(lab: Lab, span: timedelta) -> str:
    """On a faster world's clock, how long `span` lasts on the wall clock."""
    if lab.speed == 1:
        return ""
    wall = span.total_seconds() / lab.speed
    lasts = f"{wall / 60:.1f} wall minutes" if wall >= 60 else f"{wall:.0f} wall seconds"
    return f"; world time at {lab.speed:g}x: {lasts}"


def _duration(span: timedelta) -> str:
    minutes = max(0, int(span.total_seconds() // 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"
