package enforce

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// MPSDaemons runs and supervises one MPS control daemon per card:
// `nvidia-cuda-mps-control -f` (foreground, so that the agent is its parent
// and sees it exit; `-d` would detach and leave nothing to supervise) with
// CUDA_VISIBLE_DEVICES=<uuid> and per-card CUDA_MPS_PIPE_DIRECTORY and
// CUDA_MPS_LOG_DIRECTORY under Root. A daemon that exits is restarted with
// exponential backoff; Stop sends `quit` through `nvidia-cuda-mps-control`
// (as `echo quit | nvidia-cuda-mps-control` does) and waits for it.
type MPSDaemons struct {
	Root string // <Root>/<uuid>/{pipe,log}
	Bin  string // nvidia-cuda-mps-control
	// MinBackoff, MaxBackoff bound the restart delay; QuitTimeout is how long
	// Stop waits after quit before it kills.
	MinBackoff, MaxBackoff, QuitTimeout time.Duration
	Logger                              klog.Logger

	mu      sync.Mutex
	daemons map[string]*mpsDaemon
	stopped bool
	wg      sync.WaitGroup
}

var _ MPSControl = (*MPSDaemons)(nil)

type mpsDaemon struct {
	uuid, pipe, log string
	stop            chan struct{} // closed by Stop
}

// NewMPSDaemons returns a supervisor with default backoff (1 s to 1 min) and quit timeout (10 s).
func NewMPSDaemons(root, bin string, logger klog.Logger) *MPSDaemons {
	return &MPSDaemons{Root: root, Bin: bin, MinBackoff: time.Second, MaxBackoff: time.Minute,
		QuitTimeout: 10 * time.Second, Logger: logger, daemons: map[string]*mpsDaemon{}}
}

// Start starts the daemons of the cards that have none.
func (d *MPSDaemons) Start(uuids []string) error {
	var errs []error
	for _, u := range uuids {
		if _, err := d.PipeDir(u); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PipeDir implements MPSControl: it starts the card's daemon if it has none
// and returns the host pipe directory.
func (d *MPSDaemons) PipeDir(uuid string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return "", errors.New("MPS daemons are stopping")
	}
	if m, ok := d.daemons[uuid]; ok {
		return m.pipe, nil
	}
	if _, err := exec.LookPath(d.Bin); err != nil {
		return "", fmt.Errorf("MPS control binary: %w (install it or set --mps-control-bin)", err)
	}
	m := &mpsDaemon{uuid: uuid, pipe: filepath.Join(d.Root, uuid, "pipe"), log: filepath.Join(d.Root, uuid, "log"),
		stop: make(chan struct{})}
	for _, dir := range []string{m.pipe, m.log} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("creating MPS directory: %w", err)
		}
	}
	d.daemons[uuid] = m
	d.wg.Add(1)
	go d.supervise(m)
	return m.pipe, nil
}

func (d *MPSDaemons) env(m *mpsDaemon) []string {
	return append(os.Environ(), "CUDA_VISIBLE_DEVICES="+m.uuid,
		"CUDA_MPS_PIPE_DIRECTORY="+m.pipe, "CUDA_MPS_LOG_DIRECTORY="+m.log)
}

// supervise runs the daemon until Stop, restarting it when it exits.
func (d *MPSDaemons) supervise(m *mpsDaemon) {
	defer d.wg.Done()
	logger := d.Logger.WithValues("card", m.uuid)
	delays := newRestartDelays(d.MinBackoff, d.MaxBackoff)
	for {
		started := time.Now()
		err := d.runOnce(m)
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

func (d *MPSDaemons) runOnce(m *mpsDaemon) error {
	select {
	case <-m.stop:
		return nil
	default:
	}
	cmd := exec.Command(d.Bin, "-f")
	cmd.Env = d.env(m)
	out, err := os.OpenFile(filepath.Join(m.log, "agent-daemon.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.Bin, err)
	}
	d.Logger.Info("MPS control daemon started", "card", m.uuid, "pid", cmd.Process.Pid, "pipe", m.pipe)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
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

// Stop quits every daemon and waits for them; later PipeDir calls fail.
func (d *MPSDaemons) Stop() {
	d.mu.Lock()
	if !d.stopped {
		d.stopped = true
		for _, m := range d.daemons {
			close(m.stop)
		}
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// quit asks the daemon to quit through its control pipe, as
// `echo quit | nvidia-cuda-mps-control` does, and kills it if it is still
// there after QuitTimeout.
func (d *MPSDaemons) quit(m *mpsDaemon, proc *os.Process, waited <-chan error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.QuitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.Bin)
	cmd.Env, cmd.Stdin = d.env(m), strings.NewReader("quit\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		d.Logger.Error(err, "MPS quit command failed", "card", m.uuid, "output", string(out))
	}
	select {
	case <-waited:
		d.Logger.Info("MPS control daemon stopped", "card", m.uuid)
	case <-ctx.Done():
		d.Logger.Error(nil, "MPS control daemon ignored quit; killing it", "card", m.uuid)
		proc.Signal(syscall.SIGKILL)
		<-waited
	}
}
