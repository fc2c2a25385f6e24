// Package mpsd is the MPS control daemon of a node as NVIDIA's device
// plugin deploys it: its own DaemonSet (qgpu-agent mps-control-daemon,
// manifests/mps), not a child of the agent, so that restarting or rolling
// the agent never touches a running client. Per card it sets the
// EXCLUSIVE_PROCESS compute mode, runs and supervises
// nvidia-cuda-mps-control, and marks the card ready under --mps-root,
// where the agent's mps backend (agent/enforce) looks before it hands a
// container the card's pipe directory and the shared /dev/shm.
// docs/backend-mps.md.
package mpsd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// ComputeModes sets a card's compute mode (NVML's nvmlDeviceSetComputeMode,
// as nvidia-smi -c does).
type ComputeModes interface {
	SetExclusiveProcess(uuid string, exclusive bool) error
}

// Daemons runs and supervises one MPS control daemon per card:
// `nvidia-cuda-mps-control -f` (foreground, so that this process is its
// parent and sees it exit) with CUDA_VISIBLE_DEVICES=<uuid> and per-card
// CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY under Root. The card is
// ready (<Root>/<uuid>/ready) once the daemon's control pipe exists, and not
// while the daemon is down. A daemon that exits is restarted with
// exponential backoff; Stop sends `quit` through `nvidia-cuda-mps-control`
// (as `echo quit | nvidia-cuda-mps-control` does), waits, and sets the
// cards back to the DEFAULT compute mode.
type Daemons struct {
	Root string // <Root>/<uuid>/{pipe,log,ready}
	// Bin is nvidia-cuda-mps-control; "" simulates the daemons (fake cards:
	// the cards are marked ready and nothing runs).
	Bin   string
	Modes ComputeModes
	// Isolate, if set, runs every nvidia-cuda-mps-control of a card with
	// the card's shared memory directory at /dev/shm (ShmNamespace).
	Isolate Isolate
	// MinBackoff, MaxBackoff bound the restart delay; QuitTimeout is how long
	// Stop waits after quit before it kills; ReadyTimeout how long a started
	// daemon has to create its control pipe.
	MinBackoff, MaxBackoff, QuitTimeout, ReadyTimeout time.Duration
	Logger                                            klog.Logger

	mu      sync.Mutex
	daemons map[string]*daemon
	stopped bool
	wg      sync.WaitGroup
}

type daemon struct {
	uuid, pipe, log, ready string
	shm                    string        // <Root>/<uuid>/shm, its /dev/shm
	stop                   chan struct{} // closed by Stop or release
	done                   chan struct{} // closed when its supervisor returns

	mu      sync.Mutex // syncCeiling is called by markReady and FollowOnce
	applied string     // the ceiling file's text in force on this run ("" none)
}

// New returns a supervisor with default backoff (1 s to 1 min), quit
// timeout (10 s) and ready timeout (30 s).
func New(root, bin string, modes ComputeModes, logger klog.Logger) *Daemons {
	return &Daemons{Root: root, Bin: bin, Modes: modes, MinBackoff: time.Second, MaxBackoff: time.Minute,
		QuitTimeout: 10 * time.Second, ReadyTimeout: 30 * time.Second, Logger: logger, daemons: map[string]*daemon{}}
}

// Start sets each card's compute mode and starts its daemon; a card that
// fails is reported and the others start.
func (d *Daemons) Start(uuids []string) error {
	if d.Bin != "" {
		if _, err := exec.LookPath(d.Bin); err != nil {
			return fmt.Errorf("MPS control binary: %w (the daemon's container needs NVIDIA_DRIVER_CAPABILITIES=compute,utility, or set --mps-control-bin)", err)
		}
	}
	var errs []error
	for _, u := range uuids {
		if err := d.start(u); err != nil {
			errs = append(errs, fmt.Errorf("card %s: %w", u, err))
		}
	}
	return errors.Join(errs...)
}

func (d *Daemons) start(uuid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return errors.New("MPS daemons are stopping")
	}
	if _, ok := d.daemons[uuid]; ok {
		return nil
	}
	card := filepath.Join(d.Root, uuid)
	m := &daemon{uuid: uuid, pipe: filepath.Join(card, "pipe"), log: filepath.Join(card, "log"),
		ready: filepath.Join(card, enforce.MPSReadyFile), stop: make(chan struct{}), done: make(chan struct{})}
	_ = os.Remove(m.ready) // left by a daemon that was killed
	for _, dir := range []string{m.pipe, m.log} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating MPS directory: %w", err)
		}
	}
	shm, err := prepareCardShm(card)
	if err != nil {
		return err
	}
	m.shm = shm
	if err := d.Modes.SetExclusiveProcess(uuid, true); err != nil {
		return fmt.Errorf("setting compute mode EXCLUSIVE_PROCESS: %w", err)
	}
	_ = os.Remove(filepath.Join(card, enforce.MPSWholeFile))
	d.daemons[uuid] = m
	d.wg.Add(1)
	go d.supervise(m)
	return nil
}

// command runs nvidia-cuda-mps-control with args for card m: with its
// pipe and log directories, and through Isolate if set.
func (d *Daemons) command(ctx context.Context, m *daemon, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if d.Isolate != nil {
		cmd = d.Isolate(ctx, m.shm, append([]string{d.Bin}, args...))
	} else {
		cmd = exec.CommandContext(ctx, d.Bin, args...)
	}
	cmd.Env = d.env(m)
	return cmd
}

func (d *Daemons) env(m *daemon) []string {
	return append(os.Environ(), "CUDA_VISIBLE_DEVICES="+m.uuid,
		"CUDA_MPS_PIPE_DIRECTORY="+m.pipe, "CUDA_MPS_LOG_DIRECTORY="+m.log)
}

// supervise runs the daemon until Stop, restarting it when it exits.
func (d *Daemons) supervise(m *daemon) {
	defer d.wg.Done()
	defer close(m.done)
	logger := d.Logger.WithValues("card", m.uuid)
	delays := newRestartDelays(d.MinBackoff, d.MaxBackoff)
	for {
		started := time.Now()
		err := d.runOnce(m)
		_ = os.Remove(m.ready)
		select {
		case <-m.stop:
			return
		default:
		}
		delay := delays.next(time.Since(started))
		logger.Error(err, "MPS control daemon exited; restarting", "after", delay)
		select {
		case <-m.stop:
			return
		case <-time.After(delay):
		}
	}
}

// restartDelays is a crash-loop backoff: min, doubling up to max, and back
// to min after a run that lasted longer than max (it ran well for a while).
type restartDelays struct {
	initial, current wait.Backoff
}

func newRestartDelays(minDelay, maxDelay time.Duration) *restartDelays {
	b := wait.Backoff{Duration: minDelay, Factor: 2, Cap: maxDelay, Steps: math.MaxInt32}
	return &restartDelays{initial: b, current: b}
}

// next returns the delay before the restart of a run that lasted ran.
func (r *restartDelays) next(ran time.Duration) time.Duration {
	if ran > r.initial.Cap {
		r.current = r.initial
	}
	return r.current.Step()
}

// markReady writes the card's ready file once the daemon's control pipe
// exists and the card's ceiling is in force (the agent hands the card to
// clients only then). A ceiling that cannot be put in force keeps the
// card unready, and is tried again until it can.
func (d *Daemons) markReady(m *daemon, exited <-chan struct{}) {
	control := filepath.Join(m.pipe, "control")
	deadline := time.After(d.ReadyTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var refused string
	for {
		if _, err := os.Stat(control); err == nil || d.Bin == "" {
			deadline = nil // the pipe is there; the ceiling has no deadline
			err := d.syncCeiling(m)
			if err == nil {
				if err := os.WriteFile(m.ready, []byte(m.pipe+"\n"), 0o644); err != nil {
					d.Logger.Error(err, "Marking the MPS daemon ready", "card", m.uuid)
				}
				return
			}
			if err.Error() != refused {
				refused = err.Error()
				d.Logger.Error(err, "MPS ceiling not in force; the card stays unready", "card", m.uuid)
			}
		}
		select {
		case <-tick.C:
		case <-exited:
			return
		case <-m.stop:
			return
		case <-deadline:
			d.Logger.Error(nil, "MPS control daemon created no control pipe; the card stays unready", "card", m.uuid, "pipe", control)
			return
		}
	}
}

func (d *Daemons) runOnce(m *daemon) error {
	select {
	case <-m.stop:
		return nil
	default:
	}
	d.forgetCeiling(m)
	if d.Bin == "" {
		d.markReady(m, nil)
		<-m.stop
		return nil
	}
	cmd := d.command(context.Background(), m, "-f")
	out, err := os.OpenFile(filepath.Join(m.log, "control-daemon.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.Bin, err)
	}
	d.Logger.Info("MPS control daemon started", "card", m.uuid, "pid", cmd.Process.Pid, "pipe", m.pipe)
	// The daemon's pod has the host's PIDs: the agent finds the card's
	// servers, the daemon's children, by it (agent/mpsguard).
	pidFile := filepath.Join(filepath.Dir(m.ready), enforce.MPSDaemonPIDFile)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		d.Logger.Error(err, "Recording the MPS control daemon's PID", "card", m.uuid)
	}
	defer os.Remove(pidFile)
	waited, exited := make(chan error, 1), make(chan struct{})
	go func() { waited <- cmd.Wait(); close(exited) }()
	go d.markReady(m, exited)
	select {
	case err := <-waited:
		if err == nil {
			err = errors.New("exited with status 0")
		}
		return err
	case <-m.stop:
		d.quit(m, cmd.Process, waited)
		return nil
	}
}

// Stop quits every daemon, waits for them and sets their cards back to the
// DEFAULT compute mode; later Start calls fail.
func (d *Daemons) Stop() {
	d.mu.Lock()
	if !d.stopped {
		d.stopped = true
		for _, m := range d.daemons {
			close(m.stop)
		}
	}
	d.mu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for uuid, m := range d.daemons {
		_ = os.Remove(m.ready)
		d.forgetCeiling(m)
		if err := d.Modes.SetExclusiveProcess(uuid, false); err != nil {
			d.Logger.Error(err, "Setting compute mode DEFAULT", "card", uuid)
		}
	}
}

// quit asks the daemon to quit through its control pipe, as
// `echo quit | nvidia-cuda-mps-control` does, and kills it if it is still
// there after QuitTimeout.
func (d *Daemons) quit(m *daemon, proc *os.Process, waited <-chan error) {
	_ = os.Remove(m.ready)
	ctx, cancel := context.WithTimeout(context.Background(), d.QuitTimeout)
	defer cancel()
	cmd := d.command(ctx, m)
	cmd.Stdin = strings.NewReader("quit\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		d.Logger.Error(err, "MPS quit command failed", "card", m.uuid, "output", string(out))
	}
	select {
	case <-waited:
		d.Logger.Info("MPS control daemon stopped", "card", m.uuid)
	case <-ctx.Done():
		d.Logger.Error(nil, "MPS control daemon ignored quit; killing it", "card", m.uuid)
		_ = proc.Signal(syscall.SIGKILL)
		<-waited
	}
}
