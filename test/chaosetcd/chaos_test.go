// Package chaosetcd runs, on every test run, the fixed-seed fault
// campaign over the scenarios of a three-master control plane (the etcd
// scenarios of `capstan chaos`), and shows that the campaign catches
// every planted bug. test/chaos runs the other scenarios beside it.
package chaosetcd

import (
	"testing"

	"github.com/capstan-dev/capstan/internal/chaos/chaostest"
)

func TestMain(m *testing.M) { chaostest.Main(m) }

// Every etcd scenario, killed at each of its points, settles with every
// invariant holding.
func TestEtcdCampaign(t *testing.T) { chaostest.Campaign(t, chaostest.Etcd) }

// The campaign catches every planted bug.
func TestPlantedBugs(t *testing.T) { chaostest.PlantedBugs(t) }
