//! `configsum controller`, wired: the API client, the admin listener, the
//! Lease, the watches feeding the event loop, and the worker. Only the
//! Lease holder patches.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::info;

use super::api::{ControllerApi as _, KubeApi, Reporter};
use super::lease::{LeaderElector, Leadership};
use super::metrics::ControllerMetrics;
use super::model::message::Message;
use super::model::work::CALL_TIMEOUT;
use super::poller::{self, PollRate};
use super::provider_class_watch;
use super::reads;
use super::reconcile::Reconciler;
use super::state::flap_guard::{FlapGuard, FlapLimits};
use super::state::gate::Gate;
use super::state::pacing::TokenBucket;
use super::state::pause::Pause;
use super::state::waves::{WaveLimits, Waves};
use super::state::window::Windows;
use super::state::{Options, State};
use super::watches::{self, Watches};
use super::worker;
use crate::config::{ControllerArgs, FanOutMode};
use crate::core::LookupErrorPolicy;
use crate::lookup::KubeSource;
use crate::notify::{self, DeliveryLimits, Notifier};
use crate::process::{self, MetricsRegistry, Running, StartupError, own_namespace};
use crate::registry::RegistryConfig;
use crate::user_agent::Caller;

/// Blocks of 128 KiB and more get their own mappings, returned to the system
/// when freed. glibc's default threshold grows with each such block freed (up
/// to 32 MiB), after which list pages, response bodies and hash-table resizes
/// come from the heap and leave holes there that small long-lived allocations
/// pin: on the bench's realistic shape that was 7 MiB of peak RSS. Only the
/// controller: the webhook's many large review bodies would pay a mapping each.
/// `MALLOC_MMAP_THRESHOLD_` in the environment still wins.
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt only sets a parameter of the allocator, under its own lock.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
    }
}

/// No answer on an API connection for this long fails the call; watches
/// are ended by the server well before (`WATCH_TIMEOUT_SECONDS`).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run(args: ControllerArgs) -> Result<(), StartupError> {
    fixed_mmap_threshold();
    // A mistake in the notify file stops the start, before anything is asked of the API server.
    let targets = match &args.notify_config {
        Some(path) => notify::config::load(path)?,
        None => Vec::new(),
    };
    let digester = process::digester(&args.keys)?;
    let client = process::api_client(Caller::Controller, Some(READ_TIMEOUT)).await?;
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

    let mut metrics_registry = if args.shard.is_sharded() {
        MetricsRegistry::labelled("shard", args.shard.to_string())
    } else {
        MetricsRegistry::new()
    };
    let controller_metrics = ControllerMetrics::register(&mut metrics_registry);
    let notifications = controller_metrics.notifications.clone();
    let notifier = Notifier::start(targets, DeliveryLimits::default(), notifications)?;
    if !notifier.is_empty() {
        info!(notify = ?notifier, "notifying webhook targets");
    }
    // Each poll asks afresh: the reuse that shares a burst of reviews'
    // resolutions would only delay what a poll sees.
    let registry_config =
        RegistryConfig { reuse_for: Duration::ZERO, ..args.registries.config(Caller::Controller) };
    let registry = process::registry_client(registry_config, &controller_metrics.registries)?;
    let (running, signals) = Running::start(args.admin.metrics_listen, metrics_registry).await?;
    info!(identity = %identity, shard = %args.shard, metrics_listen = %running.admin_address, "configsum controller started");

    let (leadership_tx, mut leadership) = watch::channel(Leadership::default());
    let elector = LeaderElector::new(
        client.clone(),
        &lease_namespace,
        &args.lease_name,
        args.shard,
        &identity,
        args.lease_duration,
    );
    let election = tokio::spawn(elector.run(leadership_tx, running.stopping()));

    // Internally, an unreadable object means "retry", never "keep".
    let settings = process::settings(&args.annotations, &args.scope, LookupErrorPolicy::Deny);
    let source = Arc::new(KubeSource::new(client.clone(), settings.object_scope()));
    // The API server's bound on an Event's reportingInstance.
    let instance = identity.chars().take(128).collect();
    let mut reporter = Reporter { instance, ..Reporter::default() };
    if args.shard.is_sharded() {
        reporter.labels.insert(settings.domain.shard(), args.shard.label_value());
    }
    let api = Arc::new(KubeApi { client: client.clone(), source: source.clone(), reporter });
    // Small: a full channel holds the watches back rather than buffering a list.
    let (tx, mut messages) = mpsc::channel::<Message>(1_024);
    let reconciler = Arc::new(Reconciler {
        api: api.clone(),
        digester: digester.clone(),
        settings: settings.clone(),
        lookups: controller_metrics.lookups.clone(),
        leadership: leadership.clone(),
        dry_run: args.dry_run,
        notifier: notifier.clone(),
    });
    let (work_tx, work_rx) = mpsc::unbounded_channel();
    let bucket = TokenBucket::new(args.rate, args.burst, Instant::now());
    tokio::spawn(worker::run(reconciler, bucket, work_rx, tx.clone()));

    let mut watches = Watches::start(
        client.clone(),
        tx.clone(),
        CALL_TIMEOUT,
        &args.namespace_selector,
        &settings.namespaces,
    )
    .await?;
    let not_served = watches.not_served.clone();
    let every = args.discovery_interval;
    let partitions = watches.partitions();
    let statuses = provider_class_watch::watch_when_served(
        client.clone(),
        every,
        CALL_TIMEOUT,
        partitions,
        tx.clone(),
    );
    tokio::spawn(statuses);
    tokio::spawn(watches::discover(client, not_served, every, CALL_TIMEOUT, tx.clone()));
    let (rounds_tx, rounds) = mpsc::channel(1);
    let rate = PollRate { rate: args.registry_rate, burst: args.registry_burst };
    let poller = poller::poll(rounds, source, registry, rate, CALL_TIMEOUT, tx.clone());
    tokio::spawn(poller);
    let options = Options {
        settings,
        own_namespace,
        shard: args.shard,
        window: args.window,
        min_interval: args.min_interval,
        poll_interval: args.image_poll_interval,
        gates: gates(&args),
    };
    let mut state = State::new(options);
    let metrics = controller_metrics;

    let shutdown = signals.received();
    tokio::pin!(shutdown);
    let mut refused = None;
    let mut verdicts_at: Option<Instant> = None;
    loop {
        let mut listed = None;
        // Wake for due work, and at least every second for the metrics.
        let second = Instant::now() + Duration::from_secs(1);
        let next = state.next_due().map_or(second, |due| due.min(second));
        tokio::select! {
            message = messages.recv() => {
                let Some(message) = message else { break };
                let now = Instant::now();
                if let Message::Reconciled(done) = &message {
                    metrics.reconciled(&done.0, &done.1, now);
                }
                listed = message.completes_list();
                state.handle(message, now);
            }
            _ = tokio::time::sleep_until(next) => {}
            changed = leadership.changed() => {
                if changed.is_err() { break }
                let current = *leadership.borrow_and_update();
                state.lead(current, Instant::now());
            }
            _ = &mut shutdown => break,
        }
        // Workload watches start once the opted-in namespaces are known, and
        // list again when a namespace is opted in.
        if let Some(kind) = state.refused_kind() {
            refused = Some(watches::cluster_scoped(kind));
            break;
        }
        for kind in state.take_kinds_served() {
            if let Some(epoch) = watches.watch_kind(kind) {
                state.kind_watch_started(epoch, kind);
            }
        }
        if state.wants_workload_watches() {
            let epoch = watches.restart_workloads();
            state.workload_watches_started(epoch, &watches.kinds);
        }
        if !running.readiness.is_ready() && state.ready() {
            running.readiness.set(true);
            info!(workloads = state.workloads(), objects = state.watched_objects(), "ready");
        }
        let effects = state.tick(Instant::now());
        for request in effects.reads {
            tokio::spawn(reads::read(api.clone(), digester.clone(), request, tx.clone()));
        }
        for work in effects.work {
            let _ = work_tx.send(work);
        }
        for ended in effects.wave_outcomes {
            metrics.wave(ended.outcome, ended.took);
        }
        for workload in effects.template_reads {
            tokio::spawn(reads::read_template(api.clone(), workload, tx.clone()));
        }
        for event in effects.events {
            let api = api.clone();
            tokio::spawn(async move { api.record(event, CALL_TIMEOUT).await });
        }
        // The state hands out notices only while leading; the clock is asked again, as the
        // worker asks it before each patch.
        if !effects.notices.is_empty() && leadership.borrow().is_leading(Instant::now()) {
            for notice in effects.notices {
                notifier.notify(notice);
            }
        }
        if let Some(round) = effects.poll {
            // A round still running keeps this one from queueing behind it.
            let _ = rounds_tx.try_send(round);
        }
        metrics.queue_depth.set(state.queue_depth() as i64);
        metrics.watched_objects.set(state.watched_objects() as i64);
        metrics.halted_changes.set(state.halted_changes() as i64);
        // Counted after the queue depth, so that whoever sees the count sees the reads the
        // list started.
        if let Some(resource) = listed {
            metrics.listed(resource);
        }
        // A pass over every workload: once a second at most, not once a message.
        if verdicts_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            verdicts_at = Some(Instant::now());
            metrics.set_verdicts(&state.verdicts());
        }
    }
    info!("shutting down: releasing the Lease");
    running.begin_shutdown();
    let _ = election.await;
    running.finished().await;
    refused.map_or(Ok(()), Err)
}

/// The gates a trigger passes, in order, from their flags: the flap guard, pauses,
/// maintenance windows, then waves. Waves come last: a workload another gate holds is no
/// member of a wave, and rolls on its own once let go.
fn gates(args: &ControllerArgs) -> Vec<Box<dyn Gate>> {
    let flap = FlapLimits { limit: args.flap_limit, period: args.flap_period };
    let windows = Windows::new(args.roll_window.as_deref(), None);
    let mut gates: Vec<Box<dyn Gate>> =
        vec![Box::new(FlapGuard::new(flap)), Box::new(Pause::default()), Box::new(windows)];
    if args.fan_out == FanOutMode::Waves {
        let max_wave = usize::try_from(args.max_wave).unwrap_or(usize::MAX);
        let limits = WaveLimits { max_wave, timeout: args.wave_timeout, dry_run: args.dry_run };
        gates.push(Box::new(Waves::new(limits, &args.annotations.annotation_domain)));
    }
    gates
}
