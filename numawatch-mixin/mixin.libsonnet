// The numawatch monitoring mixin: prometheusAlerts, prometheusRules and grafanaDashboards, configured by
// config.libsonnet's _config (README.md says how to import it with your own selectors and cluster label).
(import 'config.libsonnet')
+ (import 'alerts/alerts.libsonnet')
+ (import 'rules/rules.libsonnet')
+ (import 'dashboards/dashboards.libsonnet')
