// Building blocks of numawatch's Grafana dashboards: classic dashboard JSON (schemaVersion 39: Grafana 10.4 and 11
// load it as is, 12 migrates it on load) written as plain jsonnet objects, no grafonnet (dashboards/README.md).
{
  checks:: import '../checks.json',

  datasource:: { type: 'prometheus', uid: '${datasource}' },

  // The matchers every panel query carries. N: a numawatch series (the configured numawatchSelector, then the
  // dashboard's cluster, job and instance variables, which dashboard-linter's target-job-rule and
  // target-instance-rule ask for); C: a series recorded per cluster or an ALERTS series, which keep only the
  // cluster label; cl: the cluster label, for `by`/`on` clauses.
  selectors(c):: {
    cl: c.clusterLabel,
    C: '%s=~"$cluster"' % c.clusterLabel,
    N: '%s, %s=~"$cluster", job=~"$job", instance=~"$instance"' % [c.numawatchSelector, c.clusterLabel],
  },

  // Links between the dashboards keep the data source, the cluster and the job; tables rename `instance` to `node`.
  links(c):: {
    local to(file) = '/d/%s/%s?${datasource:queryparam}&${cluster:queryparam}&${job:queryparam}'
                     % [c.grafanaDashboardIDs[file], std.strReplace(file, '.json', '')]
                     + '&var-instance=${__data.fields.node}&${__url_time_range}',
    node: to('numawatch-node.json'),
    gpu: to('numawatch-gpu.json'),
  },

  // A per-GPU query's series with the GPU's `vendor` (nvidia, amd, habana) from numawatch_gpu_info, joined by the
  // GPU's PCI address (`gpu`) on the labels `on`, which the query's series must keep. The NVML-fed families carry no
  // vendor of their own (or one that this overrides with the same value), and a GPU numawatch_gpu_info does not
  // list keeps its series, without vendor, instead of vanishing from the panel.
  withVendor(c, expr, on='instance, gpu')::
    '(%s)\n* on (%s) group_left (vendor) max by (%s, vendor) (numawatch_gpu_info{%s})\nor on (%s) (%s)'
    % [expr, on, on, $.selectors(c).N, on, expr],

  // A table's columns: only the fields `names`, in that order, renamed by `renames` (Grafana's filterFieldsByName
  // and organize transformations).
  columns(names, renames={}):: [
    { id: 'filterFieldsByName', options: { include: { names: names } } },
    {
      id: 'organize',
      options: {
        excludeByName: {},
        indexByName: { [names[index]]: index for index in std.range(0, std.length(names) - 1) },
        renameByName: renames,
      },
    },
  ],

  // Maps each check id to its one-line remediation (from the checks registry, checks.json) in the `remediation`
  // column.
  remediationOverride:: {
    matcher: { id: 'byName', options: 'remediation' },
    properties: [
      {
        id: 'mappings',
        value: [{
          type: 'value',
          options: {
            [check.id]: { text: check.remediation, index: index }
            for index in std.range(0, std.length($.checks.checks) - 1)
            for check in [$.checks.checks[index]]
          },
        }],
      },
      { id: 'custom.width', value: 600 },
    ],
  },

  // --- queries: one per kind of target the dashboards use; `queries` names them A, B, C... in order ---
  rangeQuery(expr, legend='__auto'):: { expr: expr, legendFormat: legend, format: 'time_series', instant: false, range: true },
  instantQuery(expr, legend='__auto'):: { expr: expr, legendFormat: legend, format: 'time_series', instant: true, range: false },
  tableQuery(expr, legend='__auto'):: { expr: expr, legendFormat: legend, format: 'table', instant: true, range: false },
  queries(list):: [
    list[index] { datasource: $.datasource, refId: std.char(std.codepoint('A') + index) }
    for index in std.range(0, std.length(list) - 1)
  ],

  // --- panels: each kind with the options and field defaults every numawatch panel of that kind shares; a panel
  // adds its own with `+ { fieldConfig+: { defaults+: {...} }, ... }` (a plain `options:` replaces the shared ones) ---
  panel(type, title, description, queries, custom=null, options={}):: {
    datasource: $.datasource,
    type: type,
    title: title,
    description: description,
    targets: $.queries(queries),
    fieldConfig: { defaults: if custom == null then {} else { custom: custom }, overrides: [] },
    options: options,
  },
  stat(title, description, queries):: $.panel('stat', title, description, queries, options={
    colorMode: 'background',
    graphMode: 'none',
    justifyMode: 'auto',
    orientation: 'auto',
    reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
    textMode: 'value',
  }),
  timeseries(title, description, queries):: $.panel(
    'timeseries', title, description, queries,
    custom={ drawStyle: 'line', fillOpacity: 10, lineWidth: 1, showPoints: 'never', spanNulls: false },
    options={
      legend: { calcs: ['lastNotNull'], displayMode: 'table', placement: 'right', showLegend: true },
      tooltip: { mode: 'multi', sort: 'desc' },
    },
  ),
  // sortBy: the column the rows are sorted by (ascending), null for none.
  table(title, description, queries, sortBy='node'):: $.panel(
    'table', title, description, queries,
    custom={ align: 'auto', filterable: true },
    options={ cellHeight: 'sm', footer: { show: false }, showHeader: true }
            + (if sortBy == null then {} else { sortBy: [{ desc: false, displayName: sortBy }] }),
  ),
  // A drift state timeline: 0 is OK, 1 and more DRIFT, -1 NOT EVALUATED (the queries give -1 for a check that
  // could not look, so blind never reads as clean).
  stateTimeline(title, description, queries):: $.panel(
    'state-timeline', title, description, queries,
    custom={ fillOpacity: 80, lineWidth: 0 },
    options={
      alignValue: 'left',
      legend: { displayMode: 'list', placement: 'bottom', showLegend: true },
      mergeValues: true,
      rowHeight: 0.8,
      showValue: 'never',
      tooltip: { mode: 'single', sort: 'none' },
    },
  ) + {
    fieldConfig+: {
      defaults+: {
        mappings: [
          { type: 'value', options: { '0': { color: 'green', index: 0, text: 'OK' } } },
          { type: 'range', options: { from: 1, to: 1e12, result: { color: 'red', index: 1, text: 'DRIFT' } } },
          { type: 'value', options: { '-1': { color: 'text', index: 2, text: 'NOT EVALUATED' } } },
        ],
        thresholds: $.thresholds([['green', null], ['red', 1]]),
        unit: 'none',
      },
    },
  },
  barGauge(title, description, queries):: $.panel('bargauge', title, description, queries, options={
    displayMode: 'gradient',
    orientation: 'horizontal',
    reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
    showUnfilled: true,
  }),

  // A table column whose cells link to `url` (a field override; links.node and links.gpu keep the variables).
  linkColumn(column, title, url, targetBlank=false):: {
    matcher: { id: 'byName', options: column },
    properties: [{ id: 'links', value: [{ targetBlank: targetBlank, title: title, url: url }] }],
  },

  // Absolute thresholds from [color, from value] pairs, the first from null (everything below the next).
  thresholds(steps):: { mode: 'absolute', steps: [{ color: step[0], value: step[1] } for step in steps] },

  // --- layout: panels left to right on Grafana's 24-column grid, wrapping to a new line when a line is full ---
  row(title):: { row: title },
  at(width, height, panel):: { panel: panel, w: width, h: height },

  layout(items)::
    local step(state, item) =
      if std.objectHas(item, 'row') then
        local y = if state.x > 0 then state.y + state.lineHeight else state.y;
        state {
          x: 0,
          y: y + 1,
          lineHeight: 0,
          id: state.id + 1,
          panels+: [{
            type: 'row',
            title: item.row,
            id: state.id,
            collapsed: false,
            panels: [],
            gridPos: { x: 0, y: y, w: 24, h: 1 },
          }],
        }
      else
        local wrap = state.x + item.w > 24;
        local x = if wrap then 0 else state.x;
        local y = if wrap then state.y + state.lineHeight else state.y;
        local lineHeight = if wrap then 0 else state.lineHeight;
        state {
          x: x + item.w,
          y: y,
          lineHeight: std.max(lineHeight, item.h),
          id: state.id + 1,
          panels+: [item.panel { id: state.id, gridPos: { x: x, y: y, w: item.w, h: item.h } }],
        };
    std.foldl(step, items, { x: 0, y: 0, lineHeight: 0, id: 1, panels: [] }).panels,

  // --- variables ---
  datasourceVariable:: {
    type: 'datasource',
    name: 'datasource',
    label: 'Data source',
    query: 'prometheus',
    current: {},
    hide: 0,
    refresh: 1,
    regex: '',
    options: [],
  },

  // allValue: `.*` also matches series without the label (a single-cluster Prometheus has no cluster label);
  // job and instance use dashboard-linter's `.+` (every numawatch series has both).
  queryVariable(name, label, query, description, multi=true, includeAll=true, allValue='.*', hide=0):: {
    type: 'query',
    name: name,
    label: label,
    description: description,
    datasource: $.datasource,
    definition: query,
    query: { query: query, refId: '%s-variable' % name, qryType: 1 },
    refresh: 2,  // on time-range change: nodes come and go
    sort: 1,
    multi: multi,
    includeAll: includeAll,
    current: if includeAll then { selected: true, text: ['All'], value: ['$__all'] } else {},
    options: [],
    hide: hide,
    regex: '',
  } + (if includeAll then { allValue: allValue } else {}),

  // datasource, cluster (hidden unless showMultiCluster), job and instance: what every numawatch dashboard has.
  standardVariables(c):: [
    $.datasourceVariable,
    $.queryVariable(
      'cluster', 'Cluster', 'label_values(numawatch_build_info{%s}, %s)' % [c.numawatchSelector, c.clusterLabel],
      'The `%s` label your Prometheus adds; All when there is none.' % c.clusterLabel,
      multi=false, hide=if c.showMultiCluster then 0 else 2,
    ),
    $.queryVariable(
      'job', 'Job', 'label_values(numawatch_build_info{%s, %s=~"$cluster"}, job)' % [c.numawatchSelector, c.clusterLabel],
      "numawatch's scrape jobs (the mixin's numawatchSelector picks them).", allValue='.+',
    ),
    $.queryVariable(
      'instance', 'Instance',
      'label_values(numawatch_build_info{%s, %s=~"$cluster", job=~"$job"}, instance)' % [c.numawatchSelector, c.clusterLabel],
      'Nodes running numawatch (the ServiceMonitor sets instance to the node name).', allValue='.+',
    ),
  ],

  dashboard(c, file, title, description, variables, items):: {
    uid: c.grafanaDashboardIDs[file],
    title: c.dashboardTitlePrefix + title,
    description: description,
    tags: c.dashboardTags,
    timezone: c.dashboardTimezone,
    editable: false,
    graphTooltip: 1,
    refresh: c.dashboardRefresh,
    schemaVersion: 39,
    version: 1,
    time: { from: 'now-6h', to: 'now' },
    timepicker: {},
    fiscalYearStartMonth: 0,
    liveNow: false,
    weekStart: '',
    annotations: {
      list: [{
        builtIn: 1,
        datasource: { type: 'grafana', uid: '-- Grafana --' },
        enable: true,
        hide: true,
        iconColor: 'rgba(0, 211, 255, 1)',
        name: 'Annotations & Alerts',
        type: 'dashboard',
      }],
    },
    links: [
      {
        type: 'dashboards',
        title: 'numawatch',
        tags: c.dashboardTags,
        asDropdown: true,
        includeVars: true,
        keepTime: true,
        icon: 'external link',
        targetBlank: false,
        tooltip: '',
        url: '',
      },
      {
        type: 'link',
        title: 'Runbooks',
        url: c.runbookURLPattern % 'README',
        icon: 'doc',
        tags: [],
        asDropdown: false,
        includeVars: false,
        keepTime: false,
        targetBlank: true,
        tooltip: 'What each numawatch alert means and how to fix it',
      },
    ],
    templating: { list: variables },
    panels: $.layout(items),
  },
}
