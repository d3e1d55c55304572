package rueidisstore_test

import (
	"testing"

	"github.com/ratekit/ratekit/internal/test/redissuite"
	"github.com/ratekit/ratekit/internal/test/redistest"
)

// TestClusterLiveMigration: see [redissuite.LiveMigration], on a store of
// a rueidis cluster client of default options.
func TestClusterLiveMigration(t *testing.T) {
	c := redistest.StartCluster(t)
	store := newStore(t, newClient(t, c.Addrs()...))
	t.Run("OneSlot", func(t *testing.T) { redissuite.LiveMigration(t, c.For(t), store, "one", false) })
	t.Run("MixedSlots", func(t *testing.T) { redissuite.LiveMigration(t, c.For(t), store, "mixed", true) })
}

// TestClusterMasterKilled: see [redissuite.MasterKilled], on a store of a
// rueidis cluster client of default options: the killed master's keys
// are decided by the store again within 5 s of the Cluster agreeing on
// its promoted replica.
func TestClusterMasterKilled(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithReplicas())
	redissuite.MasterKilled(t, c, newStore(t, newClient(t, c.Addrs()...)))
}
