package mpsd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// A card is shared (EXCLUSIVE_PROCESS, a daemon, clients through it) or
// whole (DEFAULT compute mode, no daemon): the agent asks for either in
// <root>/<uuid>/request before it hands the card out (agent/enforce
// MPSRoot), and Follow switches. The scheduler never puts a whole-card pod
// and slices on one card, so the switch happens between pods; a card
// whose daemon still has a server running is never switched to whole (its
// clients would lose it), and the agent's request times out instead.

// Follow switches the cards as their requests say, every interval, until
// ctx ends. Cards without a request stay shared.
func (d *Daemons) Follow(ctx context.Context, uuids []string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		d.FollowOnce(uuids)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// FollowOnce looks at every card's request once. A card without one is
// left as Start left it (a card Start could not set up is not retried
// every second).
func (d *Daemons) FollowOnce(uuids []string) {
	for _, u := range uuids {
		raw, err := os.ReadFile(filepath.Join(d.Root, u, enforce.MPSRequestFile))
		if err == nil {
			if strings.TrimSpace(string(raw)) == enforce.MPSRequestWhole {
				err = d.release(u)
			} else {
				err = d.start(u)
			}
			if err != nil {
				d.Logger.Error(err, "Switching the card as the agent asked", "card", u, "request", string(raw))
			}
		}
		d.followCeiling(u)
	}
}

// followCeiling puts a changed ceiling in force on a ready card's daemon
// (a card not ready yet gets it from markReady, before it is ready).
func (d *Daemons) followCeiling(uuid string) {
	d.mu.Lock()
	m, ok := d.daemons[uuid]
	d.mu.Unlock()
	if !ok {
		return
	}
	if _, err := os.Stat(m.ready); err != nil {
		return
	}
	if err := d.syncCeiling(m); err != nil {
		d.Logger.Error(err, "MPS ceiling not changed", "card", uuid)
	}
}

// errClients: the card's daemon runs a server; it stays shared.
var errClients = errors.New("its MPS daemon has a server running (clients); it stays shared")

// release quits the card's daemon, sets the DEFAULT compute mode and marks
// the card whole. Nothing to do for a card already whole.
func (d *Daemons) release(uuid string) error {
	card := filepath.Join(d.Root, uuid)
	d.mu.Lock()
	m, running := d.daemons[uuid]
	d.mu.Unlock()
	if running {
		if d.serverRunning(m) {
			return errClients
		}
		// Out of the map before its stop is closed, under the lock Stop
		// takes: each stop channel is closed once.
		d.mu.Lock()
		if d.stopped || d.daemons[uuid] != m {
			d.mu.Unlock()
			return nil
		}
		delete(d.daemons, uuid)
		close(m.stop)
		d.mu.Unlock()
		<-m.done
		_ = os.Remove(m.ready)
		d.forgetCeiling(m)
		if err := d.Modes.SetExclusiveProcess(uuid, false); err != nil {
			return err
		}
		d.Logger.Info("Card handed out whole: MPS daemon stopped, compute mode DEFAULT", "card", uuid)
	}
	if _, err := os.Stat(filepath.Join(card, enforce.MPSWholeFile)); err == nil {
		return nil
	}
	return os.WriteFile(filepath.Join(card, enforce.MPSWholeFile), nil, 0o644)
}

// serverRunning asks the daemon for its servers (`get_server_list`); any
// answer other than none, or no answer, counts as running. A simulated
// daemon (no binary) has none.
func (d *Daemons) serverRunning(m *daemon) bool {
	if d.Bin == "" {
		return false
	}
	out, err := d.control(m, "get_server_list")
	return err != nil || strings.TrimSpace(out) != ""
}
