package dra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ClaimCDIKind is the kind of the CDI specs the driver writes, one per
// prepared request: claim.gpu.qgpu.io/slice=<claim UID>_<request> (the
// driver's name under a vendor of its own, so that no other spec's kind is
// touched; written whole, so that the pages name it as the code does).
const ClaimCDIKind = "claim.gpu.qgpu.io/slice"

// Driver prepares and unprepares claims for the kubelet
// (kubeletplugin.DRAPlugin). Every call holds its lock: the checkpoint is
// written whole after each change.
type Driver struct {
	// The kubelet's DRA health service (healthservice.go).
	drahealth.UnimplementedDRAResourceHealthServer

	node string
	cfg  DriverConfig

	mu       sync.Mutex
	prepared map[types.UID]Prepared
	health   healthWaiters
}

// DriverConfig is what the driver reads of the agent.
type DriverConfig struct {
	// Cards are the node's cards (the agent's inventory).
	Cards func() []protocol.Card
	// Grantable refuses a card that is unhealthy or in MIG mode now.
	Grantable func(uuid string) error
	// Backend is the node's enforcement backend and policy; the backend
	// must answer undelivered (enforce.Edits).
	Backend func() (enforce.Backend, protocol.Policy, error)
	// CDI writes the claims' specs and finds the cards' devices in the
	// node's specs.
	CDI        *enforce.CDISpecs
	Checkpoint Checkpoint
	// DeviceGrants, if set, lists the device plugins' grants of the
	// node's pods that have not terminated (a node switched to DRA while
	// such pods run): they hold the same cards as the claims. fresh asks
	// for the pods from the API server rather than the informer's cache.
	DeviceGrants func(ctx context.Context, fresh bool) ([]store.Grant, error)
	// OnChange, if set, is called after a claim was prepared or unprepared.
	OnChange func()
	// Fatal, if set, receives the errors the kubelet plugin cannot recover
	// from (its gRPC servers failed).
	Fatal func(error)
	// DroppedFields, if set, receives the ResourceSlice controller's
	// report that the API server dropped fields of a published slice.
	DroppedFields func(ctx context.Context, err error)
}

var (
	_ kubeletplugin.DRAPlugin           = (*Driver)(nil)
	_ drahealth.DRAResourceHealthServer = (*Driver)(nil)
)

// NewDriver loads the checkpoint: a restarted driver answers the kubelet
// with what it prepared before.
func NewDriver(node string, cfg DriverConfig) (*Driver, error) {
	if node == "" || cfg.Cards == nil || cfg.Grantable == nil || cfg.Backend == nil || cfg.CDI == nil || cfg.Checkpoint.Path == "" {
		return nil, errors.New("dra: node, cards, grantable, backend, CDI specs and checkpoint path are required")
	}
	prepared, err := cfg.Checkpoint.Load()
	if err != nil {
		return nil, err
	}
	return &Driver{node: node, cfg: cfg, prepared: prepared}, nil
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: each claim is
// prepared on its own, and a claim that cannot be says why in its result.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		p, err := d.prepare(ctx, c)
		if err != nil {
			out[c.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)}
			continue
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: d.devices(p)}
	}
	d.changed()
	return out, nil
}

// prepare answers a claim prepared before from the same allocation from
// the checkpoint (writing its specs again where they are gone: /var/run is
// a tmpfs). It prepares a new one, and one prepared from another
// allocation again, once the old preparation is undone: nothing is written
// until every result has been read and the cards found to have room.
func (d *Driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) (Prepared, error) {
	if p, ok := d.prepared[claim.UID]; ok {
		if d.preparedFrom(p, claim) {
			return p, d.writeSpecs(p)
		}
		klog.FromContext(ctx).Info("Preparing a claim again: its allocation is not the one it was prepared from", "claim", klog.KObj(claim))
		if err := d.unprepare(ctx, claim.UID); err != nil {
			return Prepared{}, fmt.Errorf("undoing its preparation from an earlier allocation: %w", err)
		}
	}
	requests, err := Requests(claim, d.node, d.cardOf)
	if err != nil {
		return Prepared{}, err
	}
	if err := d.withinCapacity(ctx, claim, requests); err != nil {
		return Prepared{}, err
	}
	p := Prepared{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name, Allocation: allocationOf(claim)}
	backend, policy, err := d.cfg.Backend()
	if err != nil {
		return Prepared{}, err
	}
	for _, r := range requests {
		pr, err := d.edits(ctx, claim, r, backend, policy)
		if err != nil {
			return Prepared{}, fmt.Errorf("request %q: %w", r.Name, err)
		}
		p.Requests = append(p.Requests, pr)
	}
	if err := d.writeSpecs(p); err != nil {
		d.removeSpecs(p)
		return Prepared{}, err
	}
	d.prepared[claim.UID] = p
	if err := d.cfg.Checkpoint.Save(d.prepared); err != nil {
		delete(d.prepared, claim.UID)
		d.removeSpecs(p)
		return Prepared{}, err
	}
	klog.FromContext(ctx).V(2).Info("Prepared claim", "claim", klog.KObj(claim), "requests", len(p.Requests), "backend", backend.Name())
	return p, nil
}

// edits is what the node's backend hands a container of r's slices, the
// same as the device plugins' Allocate answers for them, and the cards'
// devices in the node's CDI specs.
func (d *Driver) edits(ctx context.Context, claim *resourceapi.ResourceClaim, r Request, backend enforce.Backend, policy protocol.Policy) (PreparedRequest, error) {
	for _, s := range r.Slices {
		if err := d.cfg.Grantable(s.UUID); err != nil {
			return PreparedRequest{}, err
		}
	}
	cards, err := d.cfg.CDI.CardDevices(r.Slices)
	if err != nil {
		return PreparedRequest{}, err
	}
	key := requestKey(r.Name)
	envs, mounts, err := enforce.Edits(backend, enforce.Request{Class: r.Class, Policy: policy, Slices: r.Slices,
		PodUID: string(claim.UID), Namespace: claim.Namespace, Pod: claim.Name, Container: key,
		CardSlices: func(uuid string) ([]protocol.Slice, error) { return d.cardSlices(ctx, uuid) }})
	if err != nil {
		return PreparedRequest{}, err
	}
	return PreparedRequest{Request: r, SpecDevice: string(claim.UID) + "_" + key, CardDevices: cards,
		Edits: enforce.CDIEdits(envs, mounts)}, nil
}

// cardSlices lists the slices held on card uuid (the mps backend's
// ceiling, enforce.Request.CardSlices): the prepared claims' (a claim
// stays prepared while a pod of the node uses it) and the device
// plugins' grants of the node's live pods (a node switched to DRA under
// running pods), as withinCapacity counts them. Called under d.mu.
func (d *Driver) cardSlices(ctx context.Context, uuid string) ([]protocol.Slice, error) {
	var out []protocol.Slice
	on := func(slices []protocol.Slice) {
		for _, s := range slices {
			if s.UUID == uuid {
				out = append(out, s)
			}
		}
	}
	for _, p := range d.prepared {
		for _, r := range p.Requests {
			on(r.Slices)
		}
	}
	if d.cfg.DeviceGrants != nil {
		grants, err := d.cfg.DeviceGrants(ctx, false)
		if err != nil {
			return nil, fmt.Errorf("reading the device plugins' grants on card %s: %w", uuid, err)
		}
		for _, g := range grants {
			on(g.Slices)
		}
	}
	return out, nil
}

// requestKey is a request's name where '/' may not stand (a CDI device
// name, a HAMi-core region directory): request names are DNS labels, so
// "<request>.<subrequest>" names one request only.
func requestKey(request string) string { return strings.ReplaceAll(request, "/", ".") }

func (d *Driver) writeSpecs(p Prepared) error {
	for _, r := range p.Requests {
		if d.cfg.CDI.HasDevice(ClaimCDIKind, r.SpecDevice) {
			continue
		}
		ann := map[string]string{"qgpu.io/claim": p.Namespace + "/" + p.Name, "qgpu.io/request": r.Name}
		if _, err := d.cfg.CDI.WriteDevice(ClaimCDIKind, r.SpecDevice, ann, r.Edits); err != nil {
			return fmt.Errorf("request %q: %w", r.Name, err)
		}
	}
	return nil
}

func (d *Driver) removeSpecs(p Prepared) error {
	var errs []error
	for _, r := range p.Requests {
		errs = append(errs, d.cfg.CDI.RemoveDevice(ClaimCDIKind, r.SpecDevice))
	}
	return errors.Join(errs...)
}

// devices are the kubelet's answer for p: one device per allocated card,
// each with the card's CDI device; the request's own spec goes with its
// first device only, so that a container gets its edits once.
func (d *Driver) devices(p Prepared) []kubeletplugin.Device {
	var out []kubeletplugin.Device
	vendor, class := parser.ParseQualifier(ClaimCDIKind)
	for _, r := range p.Requests {
		for i, dev := range r.Devices {
			ids := []string{r.CardDevices[i]}
			if i == 0 {
				ids = append(ids, parser.QualifiedName(vendor, class, r.SpecDevice))
			}
			out = append(out, kubeletplugin.Device{Requests: []string{r.Name}, PoolName: d.node, DeviceName: dev, CDIDeviceIDs: ids})
		}
	}
	return out
}

func (d *Driver) cardOf(index int) (protocol.Card, bool) {
	for _, c := range d.cfg.Cards() {
		if c.Index == index {
			return c, true
		}
	}
	return protocol.Card{}, false
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: a claim the
// driver does not know is unprepared already.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		if err := d.unprepare(ctx, c.UID); err != nil {
			out[c.UID] = fmt.Errorf("claim %s: %w", c.NamespacedName, err)
			continue
		}
		out[c.UID] = nil
	}
	d.changed()
	return out, nil
}

// unprepare removes the claim's specs, then its checkpoint entry: a crash
// between the two leaves an entry whose specs are gone, which the next
// unprepare removes.
func (d *Driver) unprepare(ctx context.Context, uid types.UID) error {
	p, ok := d.prepared[uid]
	if !ok {
		return nil
	}
	if err := d.removeSpecs(p); err != nil {
		return err
	}
	delete(d.prepared, uid)
	if err := d.cfg.Checkpoint.Save(d.prepared); err != nil {
		d.prepared[uid] = p
		return err
	}
	klog.FromContext(ctx).V(2).Info("Unprepared claim", "claim", klog.KRef(p.Namespace, p.Name), "uid", uid)
	return nil
}

// CleanupStale unprepares the checkpointed claims whose ResourceClaim no
// longer exists, or exists under another UID (deleted and created again):
// the kubelet will never ask to unprepare them. A claim the API server
// cannot be asked about now is kept.
func (d *Driver) CleanupStale(ctx context.Context, client kubernetes.Interface) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for uid, p := range d.prepared {
		got, err := client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", p.Namespace, p.Name, err))
			continue
		case got.UID == uid:
			continue
		}
		klog.FromContext(ctx).Info("Unpreparing a claim that no longer exists", "claim", klog.KRef(p.Namespace, p.Name), "uid", uid)
		if err := d.unprepare(ctx, uid); err != nil {
			errs = append(errs, err)
		}
	}
	d.changed()
	return errors.Join(errs...)
}

// HandleError implements kubeletplugin.DRAPlugin: a slice whose fields the
// API server dropped goes to DroppedFields; an error the plugin cannot
// recover from goes to Fatal; the rest is logged.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if d.cfg.DroppedFields != nil && isDroppedFields(err) {
		d.cfg.DroppedFields(ctx, err)
	}
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.cfg.Fatal != nil {
		d.cfg.Fatal(fmt.Errorf("%s: %w", msg, err))
	}
}

func (d *Driver) changed() {
	if d.cfg.OnChange != nil {
		d.cfg.OnChange()
	}
}

// Prepared lists the prepared claims.
func (d *Driver) Prepared() []Prepared {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Prepared, 0, len(d.prepared))
	for _, p := range d.prepared {
		out = append(out, p)
	}
	return out
}
