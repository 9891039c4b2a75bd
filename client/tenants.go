package client

import (
	"context"

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
