//! `configsum controller`, wired: the API client, the admin listener, the
//! Lease, the watches feeding the event loop, and the worker. Only the
//! Lease holder patches.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::info;

use super::images::{self, LatestDigests, PollRate};
use super::lease::{LeaderElector, Leadership};
use super::metrics::ControllerMetrics;
use super::queue::TokenBucket;
use super::reconcile::{CALL_TIMEOUT, Reconciler};
use super::state::{Options, Reader, State};
use super::watches::{Message, Watches};
use super::worker;
use super::workload::Snapshots;
use crate::config::ControllerArgs;
use crate::core::LookupErrorPolicy;
use crate::lookup::KubeSource;
use crate::process::{self, MetricsRegistry, Running, StartupError, own_namespace};
use crate::registry::RegistryConfig;

/// No answer on an API connection for this long fails the call; watches
/// are ended by the server well before (`WATCH_TIMEOUT_SECONDS`).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run(args: ControllerArgs) -> Result<(), StartupError> {
    let digester = process::digester(&args.keys)?;
    let client = process::api_client(Some(READ_TIMEOUT)).await?;
    // The Lease's namespace only; the namespace configsum protects is its own
    // (POD_NAMESPACE) in the controller as in the webhook.
    let own_namespace = own_namespace();
    let lease_namespace = args.lease_namespace.clone().unwrap_or_else(|| own_namespace.clone());
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_owned()))
        .unwrap_or_else(|| format!("configsum-controller-{}", std::process::id()));

    let mut metrics_registry = MetricsRegistry::new();
    let controller_metrics = ControllerMetrics::register(&mut metrics_registry);
    // Each poll asks afresh: the reuse that shares a burst of reviews'
    // resolutions would only delay what a poll sees.
    let registry_config = RegistryConfig { reuse_for: Duration::ZERO, ..args.registries.config() };
    let registry = process::registry_client(registry_config, &controller_metrics.registries)?;
    let (running, signals) = Running::start(args.admin.metrics_listen, metrics_registry).await?;
    info!(identity = %identity, metrics_listen = %running.admin_address, "configsum controller started");

    let (leadership_tx, mut leadership) = watch::channel(Leadership::default());
    let elector = LeaderElector::new(
        client.clone(),
        &lease_namespace,
        &args.lease_name,
        &identity,
        args.lease_duration,
    );
    let election = tokio::spawn(elector.run(leadership_tx, running.stopping()));

    // Internally, an unreadable object means "retry", never "keep".
    let settings = process::settings(&args.annotations, LookupErrorPolicy::Deny);
    let source = Arc::new(KubeSource::new(client.clone()));
    let snapshots = Snapshots::default();
    // Small: a full channel holds the watches back rather than buffering a list.
    let (tx, mut messages) = mpsc::channel::<Message>(1_024);
    let latest_digests = LatestDigests::default();
    let reconciler = Arc::new(Reconciler {
        client: client.clone(),
        source: source.clone(),
        digester: digester.clone(),
        settings: settings.clone(),
        lookups: controller_metrics.lookups.clone(),
        snapshots: snapshots.clone(),
        leadership: leadership.clone(),
        latest_digests: latest_digests.clone(),
    });
    let (work_tx, work_rx) = mpsc::unbounded_channel();
    let bucket = TokenBucket::new(args.rate, args.burst, std::time::Instant::now());
    tokio::spawn(worker::run(reconciler, bucket, work_rx, tx.clone()));

    let mut watches = Watches::start(client, tx.clone(), CALL_TIMEOUT).await;
    let (rounds_tx, rounds) = mpsc::channel(1);
    let rate = PollRate { rate: args.registry_rate, burst: args.registry_burst };
    let poller = images::poll(rounds, source.clone(), registry, rate, CALL_TIMEOUT, tx.clone());
    tokio::spawn(poller);
    let options = Options {
        settings,
        own_namespace,
        window: args.window,
        min_interval: args.min_interval,
        poll_interval: args.image_poll_interval,
    };
    let reader = Reader { source, digester, tx };
    let mut state = State::new(options, reader, work_tx, snapshots, controller_metrics);
    state.poll_images(rounds_tx, latest_digests);
    state.expected_kinds = watches.kinds.len();

    let shutdown = signals.received();
    tokio::pin!(shutdown);
    loop {
        // Wake for due work, and at least every second for the metrics.
        let next = state
            .next_due()
            .map(Instant::from_std)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(1))
            .min(Instant::now() + Duration::from_secs(1));
        tokio::select! {
            message = messages.recv() => {
                let Some(message) = message else { break };
                state.handle(message);
            }
            _ = tokio::time::sleep_until(next) => {}
            changed = leadership.changed() => {
                if changed.is_err() { break }
                let current = *leadership.borrow_and_update();
                state.lead(current);
            }
            _ = &mut shutdown => break,
        }
        // Workload watches start once the opted-in namespaces are known, and
        // list again when a namespace is opted in.
        if state.namespaces_synced() && (state.generation == 0 || state.restart_workload_watches) {
            state.restart_workload_watches = false;
            state.generation = watches.restart_workloads();
        }
        if !running.readiness.is_ready() && state.ready() {
            running.readiness.set(true);
            info!(workloads = state.workloads(), objects = state.watched_objects(), "ready");
        }
        state.dispatch();
        state.metrics.queue_depth.set(state.queue_depth() as i64);
        state.metrics.watched_objects.set(state.watched_objects() as i64);
    }
    info!("shutting down: releasing the Lease");
    running.begin_shutdown();
    let _ = election.await;
    running.finished().await;
    Ok(())
}
