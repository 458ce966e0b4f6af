"""`/v1/policy`: the active Cedar policy set, read by reviewers and auditors, published by a
policy administrator (a reviewer of the directory group `policy-admins`).

A publish is signed by the service (the reviewer side) for the authenticated administrator,
validated against the registered tools' schema (refused with Cedar's diagnostics: 422, nothing
changes) and journaled as the next version.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from approvals.policies import Mode, PolicySets
from approvals.policies.sets import MAX_POLICY_BYTES

from .approvals_api import Caller, service_of
from .errors import ApiError

__all__ = ["router"]

router = APIRouter(prefix="/v1/policy", tags=["policy"])


class Publish(BaseModel):
    """A set to publish as the next version."""

    model_config = ConfigDict(extra="forbid")

    policies: str = Field(default="", max_length=MAX_POLICY_BYTES)
    mode: Mode = Mode.ENFORCE
    timezone: str = Field(default="UTC", max_length=64)
    expect_version: int | None = Field(default=None, ge=0)


@router.get("", summary="The active policy set (or `version`), with its text")
async def show(
    request: Request, identity: Caller, version: int | None = Query(default=None, ge=1)
) -> dict[str, Any]:
    service = service_of(request)
    sets = PolicySets(service.db, service.ring)
    wanted = version or await sets.head()
    if wanted == 0:
        return {"version": 0, "mode": "off", "policies": "", "policy_ids": []}
    return (await sets.get(wanted)).to_json()


@router.put("", summary="Publish a policy set as the next version (a policy administrator)")
async def publish(request: Request, identity: Caller, body: Publish) -> dict[str, Any]:
    if not identity.may_decide:
        raise ApiError(403, "forbidden", "publishing a policy set needs a reviewer's identity")
    service = service_of(request)
    published = await PolicySets(service.db, service.ring).publish(
        body.policies,
        by=identity.reviewer,
        mode=body.mode,
        timezone=body.timezone,
        expect_version=body.expect_version,
    )
    return published.to_json()
