//! The command line (docs/flags.md). Every flag is also `CONFIGSUM_<FLAG>`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::controller::model::shard::Shard;
use crate::core::model::annotations::{DEFAULT_DOMAIN, DEFAULT_NAMESPACE_SELECTOR};
use crate::core::model::label_selector::LabelSelector;
use crate::core::model::object_ref::is_namespace_name;
use crate::core::{AnnotationDomain, LookupErrorPolicy};
use crate::registry::RegistryConfig;
use crate::registry::policy::RegistryPolicy;
use crate::user_agent::Caller;

#[derive(Parser, Debug)]
#[command(
    name = "configsum",
    version,
    about = "Roll Kubernetes workloads when their ConfigMaps and Secrets change"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The file name kubectl runs for `kubectl configsum` (a link to, or a copy of, this binary).
pub const KUBECTL_PLUGIN: &str = "kubectl-configsum";

impl Cli {
    /// Parses the command line; run as the kubectl plugin, help and errors say
    /// `kubectl configsum`, as the user typed it.
    pub fn parse_args() -> Cli {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let invoked = std::env::args_os().next().map(std::path::PathBuf::from);
        let plugin = invoked
            .as_deref()
            .and_then(std::path::Path::file_name)
            .is_some_and(|name| name.to_string_lossy().starts_with(KUBECTL_PLUGIN));
        let mut command = Cli::command();
        if plugin {
            command = command.bin_name("kubectl configsum");
        }
        let matches = command.get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the mutating admission webhook.
    Serve(ServeArgs),
    /// Create the shared digest key Secret with a random key unless it exists (run by the install Job).
    EnsureDigestKey(EnsureDigestKeyArgs),
    /// Roll workloads when only their ConfigMaps, Secrets or image tags change.
    Controller(ControllerArgs),
    /// Write the digests into a YAML stream or KRM ResourceList (stdin to stdout), as admission would.
    Render(RenderArgs),
    /// Which workloads roll when a ConfigMap or Secret changes, or what a workload tracks and
    /// whether its pods run its template; why or why not (docs/explain.md).
    Explain(ExplainArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// What to explain: configmap/<name>, secret/<name>, or a workload as kubectl names it
    /// (deployment/<name>, sts/<name>, a declared kind's lower-case name).
    pub object: String,
    /// The namespace of the object and its workloads (default: the kubeconfig context's, or
    /// `default` with -f; objects in the files that name none are in it).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Only the workloads whose pods read this key of the object.
    #[arg(long)]
    pub key: Option<String>,
    /// YAML streams to read the objects and workloads from, such as a Helm render (repeatable;
    /// `-` is stdin). Without it, the cluster of the kubeconfig is read.
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// The kubeconfig context to read (default: the current one).
    #[arg(long, conflicts_with = "files")]
    pub context: Option<String>,
    /// The digest key file, for Secrets' verdicts (else the installed key Secret, when the
    /// cluster is read and it may be; else they read `unknown`).
    #[arg(long, env = "CONFIGSUM_DIGEST_KEY_FILE")]
    pub digest_key_file: Option<PathBuf>,
    /// `text` for people, `json` for scripts (docs/explain.md).
    #[arg(long, value_enum, default_value_t = ExplainOutput::Text)]
    pub output: ExplainOutput,
    /// The installed digest key Secret, as NAMESPACE/NAME, read when no --digest-key-file is
    /// given and the cluster is read.
    #[arg(long, default_value = "configsum-system/configsum-digest-key", value_parser = parse_secret_ref)]
    pub digest_key_secret: (String, String),
    /// Ask no registry what a workload's tracked tags point at now (their verdicts then read
    /// `unknown`).
    #[arg(long)]
    pub no_registry: bool,
    #[command(flatten)]
    pub registries: RegistryArgs,
    #[command(flatten)]
    pub annotations: AnnotationArgs,
    #[command(flatten)]
    pub kinds: CustomKindsArgs,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExplainOutput {
    Text,
    Json,
}

/// Workload CRDs and operators' custom resources declared in a file (docs/custom-kinds.md).
#[derive(Args, Debug, Clone, Default)]
pub struct CustomKindsArgs {
    /// A CustomKinds file: more kinds, handled like the built-in ones.
    #[arg(long, env = "CONFIGSUM_CUSTOM_KINDS")]
    pub custom_kinds: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct RenderArgs {
    /// The YAML stream or ResourceList to read; `-` is stdin.
    #[arg(short = 'f', long = "file", env = "CONFIGSUM_FILE", default_value = "-")]
    pub file: PathBuf,
    /// More ConfigMaps and Secrets, after those in the stream (repeatable; the first definition wins).
    #[arg(long, env = "CONFIGSUM_OBJECTS_FROM", value_delimiter = ',')]
    pub objects_from: Vec<PathBuf>,
    /// Namespace of objects that name none (Helm passes post-renderers none).
    #[arg(long, env = "CONFIGSUM_NAMESPACE", default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub keys: DigestKeyArgs,
    #[command(flatten)]
    pub annotations: AnnotationArgs,
    #[command(flatten)]
    pub kinds: CustomKindsArgs,
}

#[derive(Args, Debug, Clone)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub kinds: CustomKindsArgs,
    #[command(flatten)]
    pub keys: DigestKeyArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Changes to a workload's objects within this window become one patch (at most 1h).
    #[arg(long, env = "CONFIGSUM_WINDOW", default_value = "2s", value_parser = parse_window)]
    pub window: Duration,
    /// Patches per second, on average, across all workloads (greater than 0).
    #[arg(long, env = "CONFIGSUM_RATE", default_value_t = 5.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Patches allowed at once before the rate applies (at least 1).
    #[arg(long, env = "CONFIGSUM_BURST", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
    /// Least time between two patches of one workload (at most 24h).
    #[arg(long, env = "CONFIGSUM_MIN_INTERVAL", default_value = "0s", value_parser = parse_min_interval)]
    pub min_interval: Duration,
    /// Name of the coordination.k8s.io/v1 Lease used for leader election.
    #[arg(long, env = "CONFIGSUM_LEASE_NAME", default_value = "configsum-controller")]
    pub lease_name: String,
    /// This controller's shard, `I/N`: it rolls only the workloads of the namespaces whose
    /// name hashes to I of N, and elects its leader with the Lease `<lease-name>-I-of-N`
    /// (N = 1: the whole cluster, and the Lease `<lease-name>`). N is at most 256.
    #[arg(long, env = "CONFIGSUM_SHARD", default_value = "0/1", value_parser = Shard::parse)]
    pub shard: Shard,
    /// Namespace of the Lease (default: POD_NAMESPACE, else configsum-system).
    #[arg(long, env = "CONFIGSUM_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's name in the Lease (default: POD_NAME, else the host name).
    #[arg(long, env = "CONFIGSUM_IDENTITY")]
    pub identity: Option<String>,
    /// How long a leader's Lease lasts without renewal (1s to 1h, whole seconds).
    #[arg(long, env = "CONFIGSUM_LEASE_DURATION", default_value = "15s", value_parser = parse_lease_duration)]
    pub lease_duration: Duration,
    /// How often each tracked image's tag is resolved again (1s to 24h).
    #[arg(long, env = "CONFIGSUM_IMAGE_POLL_INTERVAL", default_value = "5m", value_parser = parse_poll_interval)]
    pub image_poll_interval: Duration,
    /// How often the API server's discovery is asked whether a workload CRD not served yet
    /// (Argo Rollouts, a declared custom kind), or the Secrets Store CSI driver's
    /// SecretProviderClassPodStatus, is served now (1s to 1h).
    #[arg(long, env = "CONFIGSUM_DISCOVERY_INTERVAL", default_value = "30s", value_parser = parse_discovery_interval)]
    pub discovery_interval: Duration,
    /// Resolutions per second, on average, against each registry (greater than 0).
    #[arg(long, env = "CONFIGSUM_REGISTRY_RATE", default_value_t = 1.0, value_parser = parse_rate)]
    pub registry_rate: f64,
    /// Resolutions allowed at once against each registry before its rate applies (at least 1).
    #[arg(long, env = "CONFIGSUM_REGISTRY_BURST", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub registry_burst: u32,
    /// Do everything but patch: each would-be roll is an Event (reason WouldRoll), a log line
    /// and outcome="dry_run" in configsum_controller_patches_total.
    #[arg(long, env = "CONFIGSUM_DRY_RUN")]
    pub dry_run: bool,
    /// Rolls of one workload by one object or image within --flap-period after which that
    /// object stops rolling it until quiet for a period (0: no flap guard).
    #[arg(long, env = "CONFIGSUM_FLAP_LIMIT", default_value_t = 5)]
    pub flap_limit: u32,
    /// The flap guard's period (1s to 24h).
    #[arg(long, env = "CONFIGSUM_FLAP_PERIOD", default_value = "10m", value_parser = parse_flap_period)]
    pub flap_period: Duration,
    /// How the workloads one change makes due roll: `waves` (canaries first, then twice as
    /// many each wave, each wave once the one before completed its rollout) or `all` (at
    /// once, paced only).
    #[arg(long, env = "CONFIGSUM_FAN_OUT", value_enum, default_value = "waves")]
    pub fan_out: FanOutMode,
    /// The most workloads in one wave (1 to 10000).
    #[arg(long, env = "CONFIGSUM_MAX_WAVE", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_wave: u32,
    /// How long a rolled workload may take to complete its rollout before its change halts
    /// (1s to 24h).
    #[arg(long, env = "CONFIGSUM_WAVE_TIMEOUT", default_value = "10m", value_parser = parse_flap_period)]
    pub wave_timeout: Duration,
    /// The namespaces whose workloads the controller rolls, by their labels (the API server's
    /// label selector syntax); the chart puts the same selector in the webhook configuration.
    #[arg(long, env = "CONFIGSUM_NAMESPACE_SELECTOR", default_value = DEFAULT_NAMESPACE_SELECTOR, value_parser = parse_selector)]
    pub namespace_selector: LabelSelector,
    /// When the controller may roll a workload that neither it nor its namespace says
    /// (`<days> <HH:MM>-<HH:MM> <IANA zone>`, several joined by `;`); none: any time.
    #[arg(long, env = "CONFIGSUM_ROLL_WINDOW", value_parser = parse_roll_window)]
    pub roll_window: Option<String>,
    #[command(flatten)]
    pub registries: RegistryArgs,
    #[command(flatten)]
    pub annotations: AnnotationArgs,
    #[command(flatten)]
    pub scope: NamespacesArgs,
    #[command(flatten)]
    pub log: LogArgs,
    /// A YAML file of webhook targets told of rolls, holds, halts... (docs/controller.md,
    /// "Notifications"); a credential: mount it from a Secret.
    #[arg(long, env = "CONFIGSUM_NOTIFY_CONFIG")]
    pub notify_config: Option<std::path::PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct EnsureDigestKeyArgs {
    /// Namespace of the Secret (the webhook's own).
    #[arg(long, env = "CONFIGSUM_NAMESPACE")]
    pub namespace: String,
    /// Name of the Secret.
    #[arg(long, env = "CONFIGSUM_SECRET_NAME", default_value = DIGEST_KEY_SECRET)]
    pub secret_name: String,
    /// Data key in the Secret that holds the key file.
    #[arg(long, env = "CONFIGSUM_SECRET_KEY", default_value = DIGEST_KEY_FILE_NAME)]
    pub secret_key: String,
    #[command(flatten)]
    pub log: LogArgs,
}

/// Default name of the digest key Secret the manifests mount.
pub const DIGEST_KEY_SECRET: &str = "configsum-digest-key";
/// Default data key (and mounted file name) of the digest key file.
pub const DIGEST_KEY_FILE_NAME: &str = "keys";

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub kinds: CustomKindsArgs,
    /// PEM certificate chain for the TLS listener (leaf first).
    #[arg(long, env = "CONFIGSUM_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// PEM private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
    #[arg(long, env = "CONFIGSUM_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Address of the HTTPS listener (/mutate, /healthz, /readyz).
    #[arg(long, env = "CONFIGSUM_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub keys: DigestKeyArgs,
    #[command(flatten)]
    pub annotations: AnnotationArgs,
    #[command(flatten)]
    pub scope: NamespacesArgs,
    /// Upper bound on all lookups of one review together.
    #[arg(long, env = "CONFIGSUM_LOOKUP_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub lookup_timeout: Duration,
    /// What to do when a ConfigMap or Secret cannot be read.
    #[arg(long, env = "CONFIGSUM_ON_LOOKUP_ERROR", value_enum, default_value_t = OnLookupError::Allow)]
    pub on_lookup_error: OnLookupError,
    /// Serve ConfigMaps and Secrets from this YAML stream instead of the API server.
    #[arg(long, env = "CONFIGSUM_OBJECTS_FROM")]
    pub objects_from: Option<PathBuf>,
    /// PEM CA certificates: /mutate then answers only callers with a client certificate they signed.
    #[arg(long, env = "CONFIGSUM_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    #[command(flatten)]
    pub registries: RegistryArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

// Groups of flags that several commands share, declared once.

/// The Secret digest keys; `serve` and `controller` must digest alike.
#[derive(Args, Debug, Clone)]
pub struct DigestKeyArgs {
    /// File of Secret digest keys, one per line, at least 16 bytes each; the first signs.
    #[arg(long, env = "CONFIGSUM_DIGEST_KEY_FILE")]
    pub digest_key_file: Option<PathBuf>,
    /// Digest Secrets with plain SHA-256 when no key file is given (guessable for weak Secrets).
    #[arg(long, env = "CONFIGSUM_ALLOW_PLAIN_SECRET_DIGESTS")]
    pub allow_plain_secret_digests: bool,
}

#[derive(Args, Debug, Clone)]
pub struct AnnotationArgs {
    /// Domain of the annotations written and read.
    #[arg(long, env = "CONFIGSUM_ANNOTATION_DOMAIN", default_value = DEFAULT_DOMAIN, value_parser = parse_domain)]
    pub annotation_domain: AnnotationDomain,
    /// Only the ConfigMaps and Secrets whose labels match count, in the API server's label
    /// selector syntax (`reload=on`, `tier in (web,api)`); the others get no digest, and an
    /// existing one is removed (default: every object).
    #[arg(long, env = "CONFIGSUM_OBJECT_SELECTOR", default_value = "", value_parser = parse_selector)]
    pub object_selector: LabelSelector,
}

/// Where configsum works: `--namespaces`.
#[derive(Args, Debug, Clone, Default)]
pub struct NamespacesArgs {
    /// The only namespaces read and served, comma-separated (default: every namespace). With
    /// it, configsum needs Roles in these namespaces only (the chart's `rbac.scope:
    /// namespaced`); the controller also needs to list and watch namespaces.
    #[arg(long, env = "CONFIGSUM_NAMESPACES", value_delimiter = ',', value_parser = parse_namespace)]
    pub namespaces: Vec<String>,
}

impl NamespacesArgs {
    /// Sorted, each once.
    pub fn sorted(&self) -> Vec<String> {
        let mut namespaces = self.namespaces.clone();
        namespaces.sort();
        namespaces.dedup();
        namespaces
    }
}

/// A namespace name: a DNS label of at most 63 characters.
fn parse_namespace(text: &str) -> Result<String, String> {
    let name = text.trim();
    if is_namespace_name(name) {
        Ok(name.to_owned())
    } else {
        Err(format!("{name:?} is not a namespace name"))
    }
}

fn parse_selector(text: &str) -> Result<LabelSelector, String> {
    LabelSelector::parse(text).map_err(|e| e.to_string())
}

/// How image digests are resolved from registries.
#[derive(Args, Debug, Clone)]
pub struct RegistryArgs {
    /// A registry spoken to over plain HTTP, as HOST or HOST:PORT (repeatable; comma-separated in the environment).
    #[arg(long = "insecure-registry", env = "CONFIGSUM_INSECURE_REGISTRY", value_delimiter = ',', value_parser = parse_insecure_registry)]
    pub insecure_registries: Vec<String>,
    /// When given, the only registries contacted, as HOST, HOST:PORT or *.DOMAIN (repeatable; comma-separated in the environment); listed hosts may be loopback or link-local addresses.
    #[arg(long = "registry-allow", env = "CONFIGSUM_REGISTRY_ALLOW", value_delimiter = ',', value_parser = parse_allowed_registry)]
    pub allowed_registries: Vec<String>,
    /// PEM CA certificates trusted for registries, besides Mozilla's roots built into the binary.
    #[arg(long, env = "CONFIGSUM_REGISTRY_CA_FILE")]
    pub registry_ca_file: Option<PathBuf>,
    /// Upper bound on one image resolution, token handshake included.
    #[arg(long, env = "CONFIGSUM_REGISTRY_TIMEOUT", default_value = "2s", value_parser = parse_registry_timeout)]
    pub registry_timeout: Duration,
}

impl RegistryArgs {
    /// The registry client's configuration, naming `caller` in its User-Agent.
    pub fn config(&self, caller: Caller) -> RegistryConfig {
        RegistryConfig {
            insecure_registries: self.insecure_registries.clone(),
            allowed_registries: self.allowed_registries.clone(),
            ca_file: self.registry_ca_file.clone(),
            timeout: self.registry_timeout,
            user_agent: crate::user_agent::header_value(caller),
            ..RegistryConfig::default()
        }
    }
}

/// `NAMESPACE/NAME` of a Secret.
fn parse_secret_ref(value: &str) -> Result<(String, String), String> {
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    match value.split_once('/') {
        Some((namespace, name)) if valid(namespace) && valid(name) => {
            Ok((namespace.to_owned(), name.to_owned()))
        }
        _ => Err("not NAMESPACE/NAME".to_owned()),
    }
}

fn parse_insecure_registry(value: &str) -> Result<String, String> {
    RegistryPolicy::new(&[value.to_owned()], &[]).map_err(|e| e.to_string())?;
    Ok(value.to_owned())
}

fn parse_allowed_registry(value: &str) -> Result<String, String> {
    RegistryPolicy::new(&[], &[value.to_owned()]).map_err(|e| e.to_string())?;
    Ok(value.to_owned())
}

fn parse_registry_timeout(value: &str) -> Result<Duration, String> {
    bounded_duration(value, Duration::from_millis(100), Duration::from_secs(60))
}

#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    /// Address of the plain-HTTP admin listener (/metrics, /healthz, /readyz).
    #[arg(long, env = "CONFIGSUM_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
}

#[derive(Args, Debug, Clone)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, env = "CONFIGSUM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLookupError {
    Allow,
    Deny,
}

impl From<OnLookupError> for LookupErrorPolicy {
    fn from(value: OnLookupError) -> Self {
        match value {
            OnLookupError::Allow => LookupErrorPolicy::Allow,
            OnLookupError::Deny => LookupErrorPolicy::Deny,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// A duration between `min` and `max` (humantime syntax: `500ms`, `2s`, `1m`).
fn bounded_duration(value: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let duration = humantime::parse_duration(value).map_err(|e| e.to_string())?;
    if duration < min || duration > max {
        return Err(format!(
            "must be between {} and {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(duration)
}

fn parse_window(value: &str) -> Result<Duration, String> {
    bounded_duration(value, Duration::ZERO, Duration::from_secs(3600))
}

fn parse_poll_interval(value: &str) -> Result<Duration, String> {
    bounded_duration(value, Duration::from_secs(1), Duration::from_secs(86_400))
}

fn parse_discovery_interval(value: &str) -> Result<Duration, String> {
    bounded_duration(value, Duration::from_secs(1), Duration::from_secs(3_600))
}

/// A `--roll-window` that parses: a flag is refused at start-up, where an annotation that
/// does not parse fails closed.
fn parse_roll_window(value: &str) -> Result<String, String> {
    crate::core::roll_window::RollWindows::parse(value).map_err(|e| e.to_string())?;
    Ok(value.to_owned())
}

/// `--fan-out`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanOutMode {
    Waves,
    All,
}

fn parse_flap_period(value: &str) -> Result<Duration, String> {
    bounded_duration(value, Duration::from_secs(1), Duration::from_secs(86_400))
}

fn parse_min_interval(value: &str) -> Result<Duration, String> {
    bounded_duration(value, Duration::ZERO, Duration::from_secs(86_400))
}

/// A Lease records its duration in whole seconds.
fn parse_lease_duration(value: &str) -> Result<Duration, String> {
    let duration = bounded_duration(value, Duration::from_secs(1), Duration::from_secs(3600))?;
    if duration.subsec_nanos() != 0 {
        return Err("must be whole seconds".to_owned());
    }
    Ok(duration)
}

fn parse_rate(value: &str) -> Result<f64, String> {
    let rate: f64 = value.parse().map_err(|_| format!("{value:?} is not a number"))?;
    if !rate.is_finite() || rate <= 0.0 {
        return Err("must be a number greater than 0".to_owned());
    }
    Ok(rate)
}

fn parse_domain(value: &str) -> Result<AnnotationDomain, String> {
    AnnotationDomain::new(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
        let argv = ["configsum", "serve", "--tls-cert", "c.pem", "--tls-key", "k.pem"];
        match Cli::try_parse_from(argv.iter().chain(args))?.command {
            Command::Serve(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_spec() {
        let args = serve(&[]).expect("parses");
        assert_eq!(args.listen.to_string(), "0.0.0.0:8443");
        assert_eq!(args.admin.metrics_listen.to_string(), "0.0.0.0:9090");
        assert_eq!(args.lookup_timeout, Duration::from_secs(2));
        assert_eq!(args.on_lookup_error, OnLookupError::Allow);
        assert_eq!(args.annotations.annotation_domain, AnnotationDomain::default());
        assert!(!args.keys.allow_plain_secret_digests);
        assert_eq!(args.log.log_format, LogFormat::Json);
    }

    #[test]
    fn parses_every_flag() {
        let args = serve(&[
            "--listen",
            "127.0.0.1:1",
            "--metrics-listen",
            "127.0.0.1:2",
            "--digest-key-file",
            "keys",
            "--annotation-domain",
            "example.com",
            "--lookup-timeout",
            "500ms",
            "--on-lookup-error",
            "deny",
            "--allow-plain-secret-digests",
            "--objects-from",
            "objects.yaml",
            "--log-format",
            "text",
        ])
        .expect("parses");
        assert_eq!(args.lookup_timeout, Duration::from_millis(500));
        assert_eq!(args.on_lookup_error, OnLookupError::Deny);
        assert_eq!(
            args.annotations.annotation_domain,
            AnnotationDomain::new("example.com").expect("domain")
        );
        assert!(args.keys.allow_plain_secret_digests);
        assert_eq!(args.log.log_format, LogFormat::Text);
    }

    fn controller(args: &[&str]) -> Result<ControllerArgs, clap::Error> {
        let argv = ["configsum", "controller"];
        match Cli::try_parse_from(argv.iter().chain(args))?.command {
            Command::Controller(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn controller_flags_are_checked() {
        let args = controller(&[]).expect("defaults");
        assert_eq!((args.rate, args.burst, args.window), (5.0, 20, Duration::from_secs(2)));
        assert_eq!(args.lease_duration, Duration::from_secs(15));
        for bad in [
            "--rate=0",
            "--rate=-1",
            "--rate=NaN",
            "--rate=inf",
            "--rate=fast",
            "--burst=0",
            "--burst=-3",
            "--window=-1s",
            "--window=2h",
            "--min-interval=100000000y",
            "--lease-duration=0s",
            "--lease-duration=1500ms",
        ] {
            let error = controller(&[bad]).expect_err(bad);
            assert_eq!(error.exit_code(), 2, "{bad}");
            let flag = bad.split('=').next().unwrap_or_default();
            assert!(error.to_string().contains(flag), "{bad}: {error}");
        }
        assert!(controller(&["--rate", "0.5", "--window", "0s", "--lease-duration", "3s"]).is_ok());
    }

    #[test]
    fn rejects_bad_values() {
        assert!(serve(&["--annotation-domain", "Not_A_Domain"]).is_err());
        assert!(serve(&["--lookup-timeout", "soon"]).is_err());
        assert!(serve(&["--on-lookup-error", "maybe"]).is_err());
    }
}
