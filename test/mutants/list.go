package main

// The packages whose tests judge the mutants.
var (
	view      = []string{"./internal/view"}
	ledger    = []string{"./plugins/qgpu/ledger"}
	plugin    = []string{"./plugins/qgpu"}
	allocate  = []string{"./agent/allocate"}
	reconcile = []string{"./agent/reconcile"}
	podres    = []string{"./agent/podresources"}
	observer  = []string{"./test/chaos"}
	agentPkg  = []string{"./agent"}
	budget    = []string{"./agent/cardbudget"}
	draPkg    = []string{"./agent/dra"}
)

// mutants are the lines that keep a card from being oversubscribed, or let
// the checks see it when it is: the ledger's capacity rules, the agent's
// fail-safes, the scheduler's release paths, every invariant of the checker
// (internal/view) and the chaos observer's view of a card. Each entry
// breaks its line the way a plausible bug would.
var mutants = []mutant{
	// The ledger's capacity rules (plugins/qgpu/ledger/card.go, ledger.go).
	{File: "plugins/qgpu/ledger/card.go", Old: "if !c.Healthy || memoryGiB > c.FreeMemoryGiB() {", New: "if !c.Healthy {", Pkgs: ledger, Why: "ledger: card memory"},
	{File: "plugins/qgpu/ledger/card.go", Old: "if !c.Healthy || memoryGiB > c.FreeMemoryGiB() {", New: "if memoryGiB > c.FreeMemoryGiB() {", Pkgs: ledger, Why: "ledger: no new slice on an unhealthy card"},
	{File: "plugins/qgpu/ledger/card.go", Old: "if newPod && c.Pods() >= c.MaxPods {", New: "if newPod && c.Pods() > c.MaxPods {", Pkgs: ledger, Why: "ledger: pods per card"},
	{File: "plugins/qgpu/ledger/card.go", Old: "return c.Online+c.Offline == 0 && c.UsedCores+cores <= protocol.CoresPerCard", New: "return c.Online+c.Offline == 0", Pkgs: ledger, Why: "ledger: general cores ≤ 100"},
	{File: "plugins/qgpu/ledger/card.go", Old: "return c.Online+c.Offline == 0 && c.UsedCores+cores <= protocol.CoresPerCard", New: "return c.UsedCores+cores <= protocol.CoresPerCard", Pkgs: ledger, Why: "ledger: general pods not on online/offline cards"},
	{File: "plugins/qgpu/ledger/card.go", Old: "return c.General == 0 && c.UsedGreedy+cores <= protocol.CoresPerCard", New: "return c.General == 0", Pkgs: ledger, Why: "ledger: offline core-greedy ≤ 100"},
	{File: "plugins/qgpu/ledger/card.go", Old: "\tcase protocol.ClassOnline:\n\t\treturn c.General == 0", New: "\tcase protocol.ClassOnline:\n\t\treturn true", Pkgs: ledger, Why: "ledger: online pods not on general cards"},
	{File: "plugins/qgpu/ledger/card.go", Old: "if cards[i].Index == s.Index && cards[i].UUID == s.UUID {", New: "if cards[i].Index == s.Index {", Pkgs: ledger, Why: "ledger: a replaced card does not inherit holdings"},
	{File: "plugins/qgpu/ledger/ledger.go", Old: "if !h.FitsOn(n.node.Cards) {", New: "if false {", Pkgs: ledger, Why: "ledger: Reserve re-checks the chosen slices"},
	{File: "plugins/qgpu/ledger/ledger.go", Old: "{ return !h.Bound && ", New: "{ return ", Pkgs: ledger, Why: "ledger: Unreserve keeps a bound holding"},
	{File: "plugins/qgpu/ledger/ledger.go", Old: "\tcase cur.Bound:\n\t\treturn false, true", New: "\tcase cur.Bound && false:\n\t\treturn false, true", Pkgs: ledger, Why: "ledger: Observe never replaces a bound holding"},
	{File: "plugins/qgpu/ledger/ledger.go", Old: "return false, other.Bound", New: "return false, true", Pkgs: ledger, Why: "ledger: Observe retries when a Reserve elsewhere records between its check and its record"},
	{File: "plugins/qgpu/ledger/ledger.go", Old: "\tif cur := l.holders[uid]; cur != nil {\n\t\tl.mu.Unlock()\n\t\treturn cur", New: "\tif cur := l.holders[uid]; cur != nil && false {\n\t\tl.mu.Unlock()\n\t\treturn cur", Pkgs: ledger, Why: "ledger: one holding per pod"},

	// The scheduler's release paths (plugins/qgpu/watch.go).
	{File: "plugins/qgpu/watch.go", Old: "\t\ts.release(klog.FromContext(ctx), pod)\n\t\treturn\n", New: "\t\treturn\n", Pkgs: plugin, Run: "TestWatch", Why: "watch: a terminal pod frees its slices"},
	{File: "plugins/qgpu/watch.go", Old: "\t\t\t\ts.release(logger, pod)\n", New: "\t\t\t\t_ = logger\n", Pkgs: plugin, Run: "TestWatch", Why: "watch: a deleted pod frees its slices"},
	{File: "plugins/qgpu/watch.go", Old: "\t\t\t\ts.ledger.RemoveNode(n.Name)\n", New: "\t\t\t\t_ = n\n", Pkgs: plugin, Run: "TestWatch", Why: "watch: a deleted node leaves the ledger"},
	{File: "plugins/qgpu/watch.go", Old: "if types.UID(a.PodUID) != pod.UID || a.Node != pod.Spec.NodeName {", New: "if types.UID(a.PodUID) != pod.UID {", Pkgs: plugin, Run: "TestWatch", Why: "watch: assignment for the node the pod is bound to"},
	{File: "plugins/qgpu/watch.go", Old: "if types.UID(a.PodUID) != pod.UID || a.Node != pod.Spec.NodeName {", New: "if types.UID(a.PodUID) == \"\" || a.Node != pod.Spec.NodeName {", Pkgs: plugin, Run: "TestWatch", Why: "watch: assignment made for this pod (UID)"},

	// The agent's fail-safes (agent/allocate, agent/reconcile).
	{File: "agent/allocate/route.go", Old: "return route{}, fmt.Errorf(\"%w: %v\", ErrStoreUnreadable, err)", New: "grants = nil", Pkgs: allocate, Why: "allocate: an unreadable store refuses every call"},
	{File: "agent/cardbudget/budget.go", Old: "c.memory+u.MemoryGiB > hw.MemoryGiB() {", New: "c.memory+u.MemoryGiB > hw.MemoryGiB()+1 {", Pkgs: append(append(budget, allocate...), draPkg...), Why: "allocate, dra: last-line card capacity (memory)"},
	{File: "agent/allocate/capacity.go", Old: "if o.Key() == g.Key() || !live[o.PodUID] {", New: "if o.Key() == g.Key() {", Pkgs: allocate, Why: "allocate: grants of terminated pods do not count"},
	{File: "agent/cardbudget/budget.go", Old: "\t\tif i < 0 {\n\t\t\treturn fmt.Errorf(\"%w: the slice names card", New: "\t\tif i < 0 && false {\n\t\t\treturn fmt.Errorf(\"%w: the slice names card", Pkgs: append(budget, allocate...), Why: "allocate: refuse a card the node lacks"},
	{File: "agent/allocate/match.go", Old: "if a.PodUID != string(pod.UID) {", New: "if false {", Pkgs: allocate, Why: "allocate: assignment made for this pod"},
	{File: "agent/allocate/match.go", Old: "if a.Node != node || pod.Spec.NodeName != node {", New: "if false {", Pkgs: allocate, Why: "allocate: assignment made for this node"},
	{File: "agent/reconcile/reconcile.go", Old: "if p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {\n\t\t\tbyUID", New: "if true {\n\t\t\tbyUID", Pkgs: reconcile, Why: "reconcile: records of terminal pods dropped"},
	{File: "agent/reconcile/kubelet.go", Old: "\tif r.Exclusive != nil {\n\t\tr.Exclusive.Lock()", New: "\tif false {\n\t\tr.Exclusive.Lock()", Pkgs: reconcile, Why: "reconcile: records and the kubelet's list compared at one instant (the Allocator's lock)"},
	{File: "agent/reconcile/reconcile.go", Old: "|| !g.GrantedAt.Before(listedAt) {", New: "{", Pkgs: reconcile, Why: "reconcile: a record newer than the pod list is not dropped"},
	{File: "agent/agent.go", Old: "Exclusive: exclusive}", New: "}", Pkgs: agentPkg, Why: "agent: the reconciler holds the Allocator's lock"},
	{File: "agent/reconcile/kubelet.go", Old: "own := !slices.ContainsFunc(h.devices,", New: "own := true || !slices.ContainsFunc(h.devices,", Pkgs: reconcile, Why: "reconcile: a container whose listed devices are not all its own is not judged (no move by a subset)"},

	// The node's card budget, one for the device plugins' grants and the
	// DRA claims (agent/cardbudget; docs/ledger.md#the-agents-last-line).
	{File: "agent/cardbudget/budget.go", Old: "if u.Cores > 0 && c.cores+u.Cores > protocol.CoresPerCard {", New: "if u.Cores > 0 && c.cores+u.Cores > protocol.CoresPerCard+1 {", Pkgs: append(budget, draPkg...), Why: "cardbudget: general cores ≤ 100"},
	{File: "agent/cardbudget/budget.go", Old: "u.Cores > 0 && c.greedy+u.Cores > protocol.CoresPerCard {", New: "u.Cores > 0 && c.greedy+u.Cores > protocol.CoresPerCard+1 {", Pkgs: append(budget, draPkg...), Why: "cardbudget: offline greedy cores ≤ 100"},
	{File: "agent/cardbudget/budget.go", Old: "if len(c.shared) > 0 {", New: "if false {", Pkgs: append(budget, draPkg...), Why: "cardbudget: a general slice not on a card with online/offline ones"},
	{File: "agent/cardbudget/budget.go", Old: "if len(c.general) > 0 {", New: "if false {", Pkgs: append(budget, draPkg...), Why: "cardbudget: online/offline slices not on a card with general ones"},
	{File: "agent/cardbudget/budget.go", Old: "\tif class != protocol.ClassOnline {\n\t\tu.Cores = s.Cores", New: "\tif false {\n\t\tu.Cores = s.Cores", Pkgs: append(budget, draPkg...), Why: "cardbudget: a claim's slice holds its cores"},

	// The DRA node's last line (agent/dra; docs/dra.md#preparing-a-claim).
	{File: "agent/dra/results.go", Old: "if r.AdminAccess != nil && *r.AdminAccess {", New: "if false {", Pkgs: draPkg, Run: "TestPrepareRefuses", Why: "dra: adminAccess refused"},
	{File: "agent/dra/driver.go", Old: "if err := d.withinCapacity(ctx, claim, requests); err != nil {", New: "if err := d.withinCapacity(ctx, claim, requests); false && err != nil {", Pkgs: draPkg, Why: "dra: no claim prepared over a card's capacity"},
	{File: "agent/dra/budget.go", Old: "\t\t\tbudget.Hold(requestUses(p.Namespace, p.Name, r.Request)...)\n", New: "\t\t\t_ = r\n", Pkgs: draPkg, Why: "dra: the prepared claims count"},
	{File: "agent/dra/budget.go", Old: "\t\t\tbudget.Hold(cardbudget.GrantUses(g)...)\n", New: "\t\t\t_ = g\n", Pkgs: draPkg, Why: "dra: the device plugins' grants count"},
	{File: "agent/dra/driver.go", Old: "if err := d.unprepare(ctx, claim.UID); err != nil {\n\t\t\treturn Prepared{}, fmt.Errorf(\"undoing", New: "if err := error(nil); err != nil {\n\t\t\treturn Prepared{}, fmt.Errorf(\"undoing", Pkgs: draPkg, Run: "TestPrepareReallocated", Why: "dra: a claim prepared again gives its old allocation back first"},
	{File: "agent/dra/driver.go", Old: "\td.mu.Lock()\n\tdefer d.mu.Unlock()\n\tout := make(map[types.UID]kubeletplugin.PrepareResult", New: "\tout := make(map[types.UID]kubeletplugin.PrepareResult", Pkgs: draPkg, Run: "TestPrepareConcurrentOverCapacity", Why: "dra: capacity check and checkpoint write under one lock"},
	{File: "agent/dra/driver.go", Old: "if d.preparedFrom(p, claim) {", New: "if true {", Pkgs: draPkg, Run: "TestPrepareReallocated", Why: "dra: a claim of another allocation is not answered from the checkpoint"},
	{File: "agent/dra/allocation.go", Old: "return now != nil && equality.Semantic.DeepEqual(*p.Allocation, *now)", New: "return now != nil && len(p.Allocation.Results) == len(now.Results)", Pkgs: draPkg, Run: "TestPrepareReallocated", Why: "dra: the allocation compared whole (card, capacity, share ID, class)"},

	// A kubelet or an Allocate call that answers late or not at all
	// (agent/allocate/README.md, "When the kubelet does not answer").
	{File: "agent/allocate/kubelet.go", Old: "\tcase podresources.Absent(err):", New: "\tdefault:", Pkgs: allocate, Why: "allocate: only an absent PodResources API falls back to the order rule"},
	{File: "agent/podresources/retry.go", Old: "case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded:", New: "case codes.Unavailable, codes.DeadlineExceeded:", Pkgs: append(podres, allocate...), Why: "allocate: the kubelet's rate limit is asked again, not taken as final"},
	{File: "agent/allocate/allocator.go", Old: "if err := ctx.Err(); err != nil {", New: "if err := ctx.Err(); false && err != nil {", Pkgs: allocate, Why: "allocate: a call whose context ended records nothing"},
	{File: "agent/allocate/reissue.go", Old: "if by := view.heldBy(g, requested); by != \"\" {", New: "if by := view.heldBy(g, requested); false && by != \"\" {", Pkgs: allocate, Why: "allocate: a record the kubelet lists on another container is not re-issued"},
	{File: "agent/allocate/reissue.go", Old: "if requested != resource || requestedAmount(g, requested) != n ||", New: "if g.Resource != resource || g.Amount != n ||", Pkgs: allocate, Why: "allocate: re-issue judged under the resource the grant was requested as"},
	{File: "agent/allocate/kubelet.go", Old: "return rec.PodUID == string(pod.UID) || rec.Namespace != pod.Namespace || rec.Name != pod.Name", New: "return true", Pkgs: append(allocate, reconcile...), Why: "allocate: an old pod's devices are not a new pod's of the same name"},
	{File: "agent/allocate/kubelet.go", Old: "\treturn containerStarted(pod, container)\n", New: "\treturn true\n", Pkgs: append(allocate, reconcile...), Why: "allocate: unrecorded devices are a pod's only once its container started"},
	{File: "agent/allocate/route.go", Old: "return p.DeletionTimestamp == nil && p.Status.Phase", New: "return p.Status.Phase", Pkgs: allocate, Why: "allocate: no repeat for a pod being deleted"},
	{File: "agent/reconcile/reconcile.go", Old: "\treturn res, errors.Join(kubeletErr, r.writeGrants(ctx, byUID, &res))", New: "\tif kubeletErr != nil {\n\t\treturn res, kubeletErr\n\t}\n\treturn res, r.writeGrants(ctx, byUID, &res)", Pkgs: reconcile, Why: "reconcile: grants written when the kubelet refuses"},

	// The node's enforcement: what a container cannot lift (agent/enforce, agent/hamiregion, agent/priority).
	{File: "agent/enforce/hami.go", Old: "for i := range hamiCardForms { // see hamiCardForms", New: "for i := range 0 { // see hamiCardForms", Pkgs: []string{"./agent/enforce"}, Why: "enforce: hami-core per-card SM limit for every ordinal the library reads"},
	{File: "agent/enforce/hami.go", Old: "\tfor i := range hamiCardForms {\n\t\tgib := smallest", New: "\tfor i := range len(slices) {\n\t\tgib := smallest", Pkgs: []string{"./agent/enforce"}, Why: "enforce: hami-core per-card memory limit for every ordinal the library reads"},
	{File: "agent/enforce/hami.go", Old: "\t\t{ContainerPath: HAMiContainerOverrideEnv, HostPath: h.overrideEnvPath(), ReadOnly: true},\n", New: "", Pkgs: []string{"./agent/enforce"}, Run: "HAMiCoreMemory", Why: "enforce: hami-core hides the image's /overrideEnv (read-only empty file)"},
	{File: "agent/enforce/delivery.go", Old: "\tif req.Edit != nil {\n\t\tif resp.Envs == nil {", New: "\tif false {\n\t\tif resp.Envs == nil {", Pkgs: []string{"./agent/enforce"}, Run: "Vocabulary", Why: "enforce: a vocabulary's edit applied before delivery (a HAMi pod without gpucores uncapped under CDI)"},
	{File: "agent/allocate/vocab.go", Old: "\tresp.CdiDevices = append(resp.CdiDevices, extra.CdiDevices...)\n", New: "", Pkgs: allocate, Run: "Vocabulary", Why: "allocate: a vocabulary answer carries the core answer's CDI device (its compute cap)"},
	{File: "agent/enforce/cdi.go", Old: "for _, id := range []string{s.UUID, strconv.Itoa(s.Index)} {", New: "for _, id := range []string{strconv.Itoa(s.Index), s.UUID} {", Pkgs: []string{"./agent/enforce"}, Run: "CDI", Why: "cdi: a card's UUID before its index (an index names another card once cards were replaced)"},
	{File: "agent/hamiregion/region.go", Old: "\tif size != FileSize {", New: "\tif size < FileSize {", Pkgs: []string{"./agent/hamiregion"}, Why: "hamiregion: a region of another size than the library's is not read"},
	{File: "agent/hamiregion/region.go", Old: "fi.Size() != FileSize {", New: "fi.Size() < FileSize {", Pkgs: []string{"./agent/hamiregion"}, Why: "hamiregion: no write into a region of another size than the library's"},
	{File: "agent/hamiregion/region.go", Old: "if n == 0 || n > MaxDevices {", New: "if n > MaxDevices {", Pkgs: []string{"./agent/hamiregion"}, Why: "hamiregion: a region without devices is not acted on"},
	{File: "agent/hamiregion/region.go", Old: "\t\tif p.PID != 0 && p.HostPID == 0 {", New: "\t\tif false && p.PID != 0 && p.HostPID == 0 {", Pkgs: []string{"./agent/priority"}, Why: "priority: interception only when every process slot in use has a host PID"},
	{File: "agent/priority/pods.go", Old: "\t\t\tcase !s.HostPIDsKnown():", New: "\t\t\tcase false:", Pkgs: []string{"./agent/priority"}, Why: "priority: an offline region with a process without host PID goes to the freezer"},
	{File: "agent/priority/regions.go", Old: "if !s.CanThrottle() || !s.HostPIDsKnown() {", New: "if !s.CanThrottle() {", Pkgs: []string{"./agent/priority"}, Why: "priority: online launches trusted only when every process has a host PID"},

	// A binding whose outcome is unknown (plugins/qgpu/bind.go, bindoutcome.go, ledger/uncertain.go).
	{File: "plugins/qgpu/ledger/ledger.go", Old: "{ return !h.Bound && !h.Uncertain && h.Node == node }", New: "{ return !h.Bound && h.Node == node }", Pkgs: ledger, Why: "bind: Unreserve keeps a bind-uncertain holding"},
	{File: "plugins/qgpu/ledger/uncertain.go", Old: "return h.Uncertain && version > h.Since", New: "return h.Uncertain && version >= h.Since", Pkgs: ledger, Why: "bind: an uncertain holding is freed only at a newer version than its binding's"},
	{File: "plugins/qgpu/bind.go", Old: "\t\t\tp.holdUncertain(ctx, pod, nodeName)\n", New: "", Pkgs: plugin, Run: "TestBind", Why: "bind: an unknown outcome keeps the slices through Unreserve"},
	{File: "plugins/qgpu/bindoutcome.go", Old: "code != 408 && code != 409 && code != 429", New: "code != 408 && code != 429", Pkgs: plugin, Run: "TestBindOutcome", Why: "bind: a 409 without evidence is unknown (storage timeout)"},

	// The chaos observer (test/chaos/observe.go).
	{File: "test/chaos/observe.go", Old: "\tif p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {\n\t\treturn false", New: "\tif p.Status.Phase == corev1.PodSucceeded {\n\t\treturn false", Pkgs: observer, Why: "observer: failed pods hold nothing"},
	{File: "test/chaos/observe.go", Old: "\tjudge(\"grants\", rewrite(", New: "\t_ = judge\n\t_ = (rewrite(", Pkgs: observer, Why: "observer: over capacity by grants"},
	{File: "test/chaos/observe.go", Old: "\t\t\treturn request.UsesClaims(p)\n", New: "\t\t\treturn true\n", Pkgs: observer, Why: "observer: a pod without a grant holds nothing by grants (a claimed pod holds its assignment)"},
	{File: "test/chaos/observe.go", Old: "\to.peak = max(o.peak, o.now)", New: "\to.peak = max(o.peak, over)", Pkgs: observer, Why: "observer: peak over all nodes at one moment"},
	{File: "test/chaos/observe.go", Old: "\t\tdelete(o.pods[before.Spec.NodeName], before.UID)\n", New: "", Pkgs: observer, Why: "observer: a deleted pod leaves its card"},

	// The chaos watchdog and the check of what containers were given (test/chaos/judge.go, delivered.go).
	{File: "test/chaos/judge.go", Old: "if a := j.allow[c]; a != nil && a.exits > 0 {", New: "if a := j.allow[c]; a != nil {", Pkgs: observer, Run: "TestJudge", Why: "watchdog: an exit past the planned kills is reported"},
	{File: "test/chaos/judge.go", Old: "if !now.After(deadline) || j.reported[c] {", New: "if true {", Pkgs: observer, Run: "TestJudge", Why: "watchdog: a component silent past the bound is reported"},
	{File: "test/chaos/delivered.go", Old: "return slices.Equal(d.cards, cards) && d.memoryGiB == mem", New: "return d.memoryGiB == mem", Pkgs: observer, Run: "TestDelivered", Why: "delivered: a container given another card than its grant"},

	// The checker's invariants (internal/view).
	{File: "internal/view/check.go", Old: "case c.UsedMemoryGiB > c.MemoryGiB:", New: "case false:", Pkgs: view, Why: "checker: card memory by assignments"},
	{File: "internal/view/check.go", Old: "case c.UsedCores > protocol.CoresPerCard:", New: "case false:", Pkgs: view, Why: "checker: general cores ≤ 100"},
	{File: "internal/view/check.go", Old: "case c.UsedGreedy > protocol.CoresPerCard:", New: "case false:", Pkgs: view, Why: "checker: offline core-greedy ≤ 100"},
	{File: "internal/view/check.go", Old: "case c.Pods() > c.MaxPods:", New: "case false:", Pkgs: view, Why: "checker: pods per card"},
	{File: "internal/view/check.go", Old: "case c.General > 0 && c.Online+c.Offline > 0:", New: "case false:", Pkgs: view, Why: "checker: classes not mixed on a card"},
	{File: "internal/view/check.go", Old: "if d := cardProblem(card); d != \"\" {", New: "if d := cardProblem(card); false && d != \"\" {", Pkgs: view, Why: "checker: card problems by assignments reported"},
	{File: "internal/view/check.go", Old: "for _, p := range c.Unassigned {", New: "for _, p := range c.Unassigned[:0] {", Pkgs: view, Why: "checker: bound pod without assignment"},
	{File: "internal/view/check.go", Old: "if c.balanced(p.Node) {\n\t\t\tcontinue", New: "if true {\n\t\t\tcontinue", Pkgs: view, Why: "checker: grant differs from assignment"},
	{File: "internal/view/check.go", Old: "out = append(out, c.checkUnknown()...)", New: "", Pkgs: view, Why: "checker: nodes of unknown capacity"},
	{File: "internal/view/check.go", Old: "return append(out, c.checkPods()...)", New: "return out", Pkgs: view, Why: "checker: slices against the request"},
	{File: "internal/view/check.go", Old: "return append(append([]Node(nil), c.Nodes...), c.Other...)", New: "return c.Nodes", Pkgs: view, Why: "checker: unlabelled/deleted nodes judged"},
	{File: "internal/view/granted.go", Old: "if d := cardProblem(card); d != \"\" {", New: "if d := cardProblem(card); false && d != \"\" {", Pkgs: view, Why: "checker: card problems by grants reported"},
	{File: "internal/view/granted.go", Old: "x.UsedMemoryGiB != y.UsedMemoryGiB ||", New: "false ||", Pkgs: view, Why: "checker: a swap only when card totals agree"},
	{File: "internal/view/held.go", Old: "case !ok:", New: "case !ok && false:", Pkgs: view, Why: "checker: record of a gone pod is stale"},
	{File: "internal/view/held.go", Old: "case p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed:", New: "case (p.Phase == v1.PodSucceeded || p.Phase == v1.PodFailed) && false:", Pkgs: view, Why: "checker: record of a terminal pod is stale"},
	{File: "internal/view/held.go", Old: "case p.Node != h.Node:", New: "case false:", Pkgs: view, Why: "checker: record on another node is stale"},
	{File: "internal/view/view.go", Old: "if p.Node != \"\" && !terminal {", New: "if p.Node != \"\" && (!terminal || true) {", Pkgs: view, Why: "checker: terminal pods hold nothing"},
	{File: "internal/view/view.go", Old: "if p.Assignment == nil {\n\t\t\tc.Unassigned", New: "if false {\n\t\t\tc.Unassigned", Pkgs: view, Why: "checker: pods without assignment listed"},
	{File: "internal/view/view.go", Old: "if types.UID(a.PodUID) != pod.UID || a.Node != pod.Spec.NodeName {", New: "if false {", Pkgs: view, Why: "checker: assignment made for this pod and node"},
	{File: "internal/view/view.go", Old: "if f, ok := c.facts[name]; !ok || !f.labelled {", New: "if false {", Pkgs: view, Why: "checker: nodes not labelled are judged"},
	{File: "internal/view/unknown.go", Old: "return ReasonNodeGone", New: "return \"\"", Pkgs: view, Why: "checker: deleted node reported"},
	{File: "internal/view/unknown.go", Old: "return p.Node != \"\" && !terminal && p.Assignment != nil", New: "return p.Node != \"\" && (!terminal || true) && p.Assignment != nil", Pkgs: view, Why: "checker: terminal pods on unknown nodes"},
	{File: "internal/view/unknown.go", Old: "\t\tc.ledger.SetNode(name, inv, reason, mixed)\n", New: "", Pkgs: view, Why: "checker: stand-in cards for unknown nodes"},
	{File: "internal/view/unknown.go", Old: "out = append(out, Violation{\"NodeUnknown\"", New: "_ = append(out, Violation{\"NodeUnknown\"", Pkgs: view, Why: "checker: NodeUnknown reported"},
	{File: "internal/view/rules.go", Old: "case !ok:", New: "case !ok && false:", Pkgs: view, Why: "checker: slice on a card not in the inventory"},
	{File: "internal/view/rules.go", Old: "case r.what == \"assignment\" && p.req != nil && !p.req.MatchesModel(card.Model):", New: "case false:", Pkgs: view, Why: "checker: model filter"},
	{File: "internal/view/rules.go", Old: "if p.Grant != nil && !sameSlices(p.Assignment, p.Grant) {", New: "if false {", Pkgs: view, Why: "checker: grant slices checked too"},
	{File: "internal/view/rules.go", Old: "if c.unknown(p.Node) != \"\" {\n\t\t\t\tcontinue // NodeUnknown", New: "if false {\n\t\t\t\tcontinue // NodeUnknown", Pkgs: view, Why: "checker: UnknownCard only on known nodes"},
	{File: "internal/view/rules.go", Old: "if req == nil {\n\t\treturn", New: "if false {\n\t\treturn", Pkgs: view, Why: "checker: pods with a bad request skipped"},
	{File: "internal/view/rules.go", Old: "if a.Class != req.Class {", New: "if false {", Pkgs: view, Why: "checker: class as requested"},
	{File: "internal/view/rules.go", Old: "if !ok {\n\t\t\tprobs", New: "if !ok && false {\n\t\t\tprobs", Pkgs: view, Why: "checker: container not in request"},
	{File: "internal/view/rules.go", Old: "if len(ca.Slices) != rc.Cards {", New: "if false {", Pkgs: view, Why: "checker: number of cards as requested"},
	{File: "internal/view/rules.go", Old: "if s.MemoryGiB != rc.PerCardMemoryGiB() || s.Cores != rc.PerCardCores() {", New: "if false {", Pkgs: view, Why: "checker: slice size as requested"},
	{File: "internal/view/rules.go", Old: "if !held[rc.Name] {", New: "if false {", Pkgs: view, Why: "checker: every requesting container has slices"},
	{File: "internal/view/rules.go", Old: "if p.Assignment.Class != protocol.ClassGeneral && !c.facts[p.Node].mixed {", New: "if false {", Pkgs: view, Why: "checker: online/offline only on mixed nodes (warning)"},
	{File: "internal/view/rules.go", Old: "if card, ok := c.card(p.Node, s); ok && !card.Healthy {", New: "if false {", Pkgs: view, Why: "checker: pods on unhealthy cards (warning)"},

	// The DRA path (plugins/qgpu/claims.go, request/claims.go, internal/view/claims.go; docs/dra.md).
	{File: "plugins/qgpu/claims.go", Old: "\t\t\tif c.Status.Allocation != nil {\n\t\t\t\treturn fmt.Errorf(\"claim %s/%s was allocated by another", New: "\t\t\tif false {\n\t\t\t\treturn fmt.Errorf(\"claim %s/%s was allocated by another", Pkgs: plugin, Run: "TestClaims", Why: "claims: never over another's allocation"},
	{File: "plugins/qgpu/claims.go", Old: "if !keptCapacity(stored) {", New: "if !keptCapacity(stored) && false {", Pkgs: plugin, Run: "TestClaims", Why: "claims: no binding when the apiserver dropped the consumed capacity"},
	{File: "plugins/qgpu/claims.go", Old: "r.Driver == protocol.DRADriver && r.ShareID != nil && *r.ShareID == share", New: "r.Driver == protocol.DRADriver", Pkgs: plugin, Run: "TestClaims", Why: "claims: Unreserve releases only its own allocation"},
	{File: "plugins/qgpu/claims.go", Old: "\t\tif c.UID != ref.UID {", New: "\t\tif false {", Pkgs: plugin, Run: "TestClaims", Why: "claims: never allocate a claim re-created since PreFilter"},
	{File: "plugins/qgpu/claims.go", Old: "\t\tif c.DeletionTimestamp != nil {", New: "\t\tif false {", Pkgs: plugin, Run: "TestClaims", Why: "claims: never allocate a claim being deleted"},
	{File: "plugins/qgpu/claims.go", Old: "s.Spec.Pool.Name == *s.Spec.NodeName && ", New: "", Pkgs: plugin, Run: "TestClaims", Why: "claims: a node serves claims in the pool named after it"},
	{File: "plugins/qgpu/claims.go", Old: "\tcase req != nil && len(req.OtherClaims) > 0:", New: "\tcase false:", Pkgs: plugin, Run: "TestClaims", Why: "claims: a pod with another driver's claim is refused, not bound with it unallocated"},
	{File: "plugins/qgpu/request/claims.go", Old: "\tif pod.Spec.NodeName != \"\" {\n\t\treturn false", New: "\tif false {\n\t\treturn false", Pkgs: []string{"./plugins/qgpu/request"}, Why: "claims: a bound pod's claim is never stale"},
	{File: "plugins/qgpu/stale.go", Old: "\tcase pod.UID == k.podUID && pod.Spec.NodeName != \"\":", New: "\tcase false && pod != nil:", Pkgs: plugin, Run: "TestStale", Why: "claims: a claim is kept when the API server has its pod bound"},
	{File: "plugins/qgpu/ledger/claims.go", Old: "covered := slices.ContainsFunc(e.consumers, func(u types.UID) bool { return n.pods[u] != nil })", New: "covered := len(e.consumers) < 0", Pkgs: ledger, Run: "TestClaim", Why: "ledger: a claim covered by its pod's holding is not counted twice"},
	{File: "plugins/qgpu/ledger/ledger.go", Old: "\th.ApplyTo(n.node.Cards, -1)\n\tl.claimsAfter(n, uid)", New: "\th.ApplyTo(n.node.Cards, -1)", Pkgs: ledger, Run: "TestClaim", Why: "ledger: a claim counts its slices once its pod's holding goes"},
	{File: "plugins/qgpu/claimwatch.go", Old: "\tif s.ledger.ReleaseClaim(c.UID) {", New: "\tif false {", Pkgs: plugin, Run: "TestClaimHolds", Why: "claims: a cleared allocation frees its slices"},
	{File: "plugins/qgpu/request/claims.go", Old: "if !exact || b%gib != 0 || b < gib", New: "if !exact || b < gib", Pkgs: []string{"./plugins/qgpu/request"}, Why: "claims: memory in whole GiB"},
	{File: "internal/view/claims.go", Old: "r.Pool != p.Node || r.Device != protocol.DRADeviceName(slice.Index) || ", New: "", Pkgs: view, Why: "checker: the claim's card is the assignment's"},
	{File: "internal/view/claims.go", Old: "mem.Value() != slice.MemoryGiB<<30 || ", New: "", Pkgs: view, Why: "checker: the claim's memory is the assignment's"},
}
