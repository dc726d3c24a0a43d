// Package chaosetcd runs, on every test run, the fixed-seed fault
// campaign over the scenarios of a three-master control plane (the etcd
// scenarios of `capstan chaos`), and shows that the campaign catches
// the planted bugs. test/chaos runs the other scenarios and bugs beside
// it.
package chaosetcd

import (
	"slices"
	"testing"

	"github.com/capstan-dev/capstan/internal/chaos/chaostest"
	"github.com/capstan-dev/capstan/internal/planted"
)

func TestMain(m *testing.M) { chaostest.Main(m) }

// Every etcd scenario, killed at each of its points, settles with every
// invariant holding.
func TestEtcdCampaign(t *testing.T) { chaostest.Campaign(t, chaostest.Etcd) }

// The campaign catches every planted bug but those test/chaos runs.
func TestPlantedBugs(t *testing.T) {
	chaostest.PlantedBugs(t, func(b planted.Bug) bool { return !slices.Contains(chaostest.ChaosPackageBugs, b.Name) })
}
