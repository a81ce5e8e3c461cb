"""The administrator's client commands: ``taas tenants create|list|delete|revoke|quotas`` (the
admin key only)."""

from __future__ import annotations

import typer
from rich.table import Table

from service.client.errors import ClientError
from service.client.models import Quotas
from service.client.terminal import (
    JSON_LIST_OPTION,
    JSON_OPTION,
    logged_in_api,
    new_table,
    one_line_errors,
    out,
    print_json,
)
from service.client.units import RATE_QUOTAS, amount, share

tenants = typer.Typer(no_args_is_help=True, help="Tenants and their keys (admin key only).")


@tenants.command("create")
@one_line_errors
def create_tenant(name: str, as_json: bool = JSON_OPTION) -> None:
    """Create a tenant; its API key is shown only this once."""
    with logged_in_api() as api:
        created = api.create_tenant(name)
    if as_json:
        return print_json(created)
    out.print(f"tenant {created['tenant_id']} ({created['name']})")
    out.print(f"API key: {created['api_key']}  (shown once; store it now)", markup=False)


@tenants.command("list")
@one_line_errors
def list_tenants(
    name: str = typer.Option("", "--name", help="Only tenants whose name contains this, in any case."),
    as_json: bool = JSON_LIST_OPTION,
) -> None:
    """Every tenant with its keys (prefixes only), oldest first."""
    with logged_in_api() as api:
        found = api.all_tenants(name)
    if as_json:
        return print_json(found)
    if not found:  # an empty output read as a command that did nothing
        empty = f"no tenant's name contains {name!r}" if name else "no tenants"
        out.print(empty, markup=False, highlight=False)
    # a block per tenant, not a table: two 36-character ids a row did not fit 80 columns, and
    # a table cut the key ids that `taas tenants revoke` takes
    for t in found:
        out.print(f"{t['tenant_id']}  {t['name']}  (created {t['created']})", markup=False, highlight=False)
        active = [k for k in t["keys"] if not k["revoked"]]
        for k in active:
            out.print(f"  key {k['key_id']}  {k['prefix']}…", markup=False, highlight=False)
        if not active:
            out.print("  no active key", highlight=False)


@tenants.command("delete")
@one_line_errors
def delete_tenant(
    tenant_id: str = typer.Argument(..., metavar="TENANT_ID"),
    yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Delete a tenant and everything it owns: keys, classifiers, datasets. Asks first."""
    if not yes and not typer.confirm(
        f"Delete tenant {tenant_id} with every classifier and dataset it owns? This cannot be undone"
    ):
        raise ClientError("nothing deleted")
    with logged_in_api() as api:
        reply = api.delete_tenant(tenant_id)
    if as_json:
        return print_json(reply)
    out.print(
        f"deleted tenant {tenant_id}: {reply['classifiers']} classifier(s), {reply['datasets']} dataset(s)",
        markup=False,
        highlight=False,
    )


@tenants.command("revoke")
@one_line_errors
def revoke_key(
    tenant_id: str = typer.Argument(..., metavar="TENANT_ID"),
    key_id: str = typer.Argument(..., metavar="KEY_ID"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Revoke one of a tenant's keys (see `taas tenants list`); requests with it fail at once."""
    with logged_in_api() as api:
        api.revoke_key(tenant_id, key_id)
    if as_json:
        return print_json({})
    out.print(f"revoked key {key_id} of tenant {tenant_id}")


@tenants.command("quotas")
@one_line_errors
def quotas(
    tenant_id: str = typer.Argument(..., metavar="TENANT_ID"),
    changes: list[str] = typer.Option(
        [],
        "--set",
        metavar="QUOTA=VALUE",
        help="Override a quota (VALUE a whole number), or put it back to the default (VALUE default).",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """A tenant's quotas: what it uses of each, in MiB or GiB where they count bytes, and how
    much that is of the quota; --set changes some first."""
    overrides = dict(_override(change) for change in changes)
    with logged_in_api() as api:
        found = api.set_quotas(tenant_id, overrides) if overrides else api.tenant_quotas(tenant_id)
    if as_json:
        return print_json(found)
    out.print(quotas_table(found))


def quotas_table(found: Quotas) -> Table:
    """Each quota: the usage, the limit (``default`` or ``set``) and the share of it used."""
    table = new_table("quota", "used", "limit", "", "share")
    for name, limit in found["quotas"].items():
        used = found["usage"].get(name)
        origin = "set" if found["overrides"].get(name) is not None else "default"
        if name in RATE_QUOTAS or used is None:
            table.add_row(name, "", amount(name, limit), origin, "")
        else:
            table.add_row(name, amount(name, used), amount(name, limit), origin, share(used, limit))
    return table


def _override(change: str) -> tuple[str, int | None]:
    name, _, value = change.partition("=")
    if not name or not value:
        raise ClientError(
            f"--set {change!r}: write QUOTA=VALUE, such as classifiers=500 or classifiers=default"
        )
    if value == "default":
        return name, None
    try:
        return name, int(value.replace("_", "").replace(",", ""))
    except ValueError:
        raise ClientError(f"--set {change!r}: the value is a whole number, or default") from None
