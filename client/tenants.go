package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// Tenants (docs/tenancy.md). A client in a tenant's NATS account needs
// nothing of this: the server names its tenant. These are the operator's,
// from Concord's own account.

// Tenants returns what every tenant holds and its quota, or tenant's
// alone when not "".
func (c *Client) Tenants(ctx context.Context, tenant string) (*schema.ClusterTenantsReply, error) {
	var r schema.ClusterTenantsReply
	return &r, c.call(ctx, subjects.ClusterTenants, schema.ClusterTenantsRequest{Tenant: tenant}, false, &r)
}

// SetQuota sets the quota a tenant is held to, or schema.QuotaDefaultTenant's
// (the quota of every tenant without its own); with Clear it removes the
// tenant's own. Setting a quota twice is setting it once, so it is retried
// like a read.
func (c *Client) SetQuota(ctx context.Context, req schema.ClusterQuotaRequest) (*schema.ClusterQuotaReply, error) {
	var r schema.ClusterQuotaReply
	return &r, c.call(ctx, subjects.ClusterQuota, req, false, &r)
}

// TenantMove sends one step of a tenant's move. Each call carries an
// idempotency key of its own, reused by its retries, so a step whose
// reply was lost is answered, not applied twice.
func (c *Client) TenantMove(ctx context.Context, req schema.ClusterTenantMoveRequest) (*schema.ClusterTenantMoveReply, error) {
	var r schema.ClusterTenantMoveReply
	return &r, c.call(ctx, subjects.ClusterTenantMove, req, true, &r)
}

// TenantExport reads a page of a tenant fenced for a move.
func (c *Client) TenantExport(ctx context.Context, req schema.ClusterTenantExportRequest) (*schema.ClusterTenantExportReply, error) {
	var r schema.ClusterTenantExportReply
	return &r, c.call(ctx, subjects.ClusterTenantExport, req, false, &r)
}

// MoveReport says what a move did.
type MoveReport struct {
	Leases, Keys, Idempotency int
	// Fenced is how long the tenant was refused on the source before the
	// target served it: from the fence to the activation.
	Fenced time.Duration
}

// MoveTenant moves tenant from the cluster src talks to onto the one dst
// talks to (both clients of Concord's own account, each with its
// cluster's subject prefix): it fences the tenant on src, copies its
// leases (with their time left at the fence), keys and idempotency
// entries a page at a time, activates it on dst and drops it on src, which
// from then on refuses it naming dst's prefix. From the fence on the
// tenant's requests get 503 (retry) until its account's imports point at
// dst. On an error it aborts both sides: src serves the tenant again and
// dst forgets what it imported.
func MoveTenant(ctx context.Context, src, dst *Client, tenant string) (MoveReport, error) {
	var rep MoveReport
	if _, err := src.TenantMove(ctx, schema.ClusterTenantMoveRequest{Tenant: tenant, Phase: schema.MoveFence, To: dst.names.Prefix()}); err != nil {
		return rep, fmt.Errorf("fence %s on the source: %w", tenant, err)
	}
	fenced := time.Now()
	imported := false
	fail := func(step string, err error) (MoveReport, error) {
		// Undo with a context of its own: ctx may be what failed.
		actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var undo []error
		if imported {
			if _, e := dst.TenantMove(actx, schema.ClusterTenantMoveRequest{Tenant: tenant, Phase: schema.MoveAbort}); e != nil {
				undo = append(undo, fmt.Errorf("abort on the target: %w", e))
			}
		}
		if _, e := src.TenantMove(actx, schema.ClusterTenantMoveRequest{Tenant: tenant, Phase: schema.MoveAbort}); e != nil {
			undo = append(undo, fmt.Errorf("abort on the source: %w", e))
		}
		return rep, errors.Join(append([]error{fmt.Errorf("%s: %w; the move was aborted", step, err)}, undo...)...)
	}
	var next int64
	for _, section := range []string{schema.ExportLeases, schema.ExportKeys, schema.ExportIdempotency} {
		after := ""
		for {
			page, err := src.TenantExport(ctx, schema.ClusterTenantExportRequest{Tenant: tenant, Section: section, After: after})
			if err != nil {
				return fail("export "+section, err)
			}
			next = page.NextLeaseID
			if len(page.Leases)+len(page.Keys)+len(page.Idempotency) > 0 {
				imported = true
				_, err := dst.TenantMove(ctx, schema.ClusterTenantMoveRequest{Tenant: tenant, Phase: schema.MoveImport,
					Leases: page.Leases, Keys: page.Keys, Idempotency: page.Idempotency})
				if err != nil {
					return fail("import "+section, err)
				}
				rep.Leases += len(page.Leases)
				rep.Keys += len(page.Keys)
				rep.Idempotency += len(page.Idempotency)
			}
			if !page.More {
				break
			}
			after = page.Next
		}
	}
	if !imported {
		// An empty tenant: an import of nothing makes its space on dst.
		imported = true
		if _, err := dst.TenantMove(ctx, schema.ClusterTenantMoveRequest{Tenant: tenant, Phase: schema.MoveImport}); err != nil {
			return fail("import", err)
		}
	}
	if _, err := dst.TenantMove(ctx, schema.ClusterTenantMoveRequest{Tenant: tenant, Phase: schema.MoveActivate, NextLeaseID: next}); err != nil {
		return fail("activate on the target", err)
	}
	rep.Fenced = time.Since(fenced)
	// The target serves the tenant: from here on there is no going back,
	// and the source only has to let go.
	if _, err := src.TenantMove(ctx, schema.ClusterTenantMoveRequest{Tenant: tenant, Phase: schema.MoveFinish}); err != nil {
		return rep, fmt.Errorf("the target serves %s, but finishing on the source failed (run the move's finish again): %w", tenant, err)
	}
	return rep, nil
}
