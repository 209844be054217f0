/* pxctl nodes: the agents registered with the coordinator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pxctl.h"

static int pxctl_list_nodes(pxctl_opts_t *o, px_rpc_channel_t *ch) {
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  req.state = (Prunex__V1__NodeState)o->state;
  Prunex__V1__ListNodesResponse *resp = NULL;
  int rc = PXCTL_EXIT_OK;
  if (px_rpc_list_nodes(ch, &req, PXCTL_DEADLINE_MS, &resp) != PX_OK) {
    rc = pxctl_rpc_fail(ch, NULL);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_array(&j);
    for (size_t i = 0; i < resp->n_nodes; i++) pxctl_json_message(&j, &resp->nodes[i]->base);
    pxctl_json_end_array(&j);
    pxctl_json_finish(&j);
  } else if (resp->n_nodes == 0) {
    printf(o->state ? "no %s nodes\n" : "no nodes registered\n",
           px_rpc_node_state_name((Prunex__V1__NodeState)o->state));
  } else {
    static const char *const h[] = {"NODE", "NAME", "HOST", "STATE", "DEVICES", "JOB",
                                    "HEARTBEAT"};
    pxctl_table_t *t = pxctl_table_create(7, h);
    for (size_t i = 0; i < resp->n_nodes; i++) {
      const Prunex__V1__Node *n = resp->nodes[i];
      int cpu = 0, cuda = 0, bad = 0;
      for (size_t k = 0; k < n->n_devices; k++) {
        if (n->devices[k]->kind == PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CUDA) cuda++;
        else cpu++;
        if (!n->devices[k]->healthy) bad++;
      }
      char dev[96] = "", age[48];
      int used = 0;
      if (cuda) used += snprintf(dev + used, sizeof dev - (size_t)used, "%d gpu", cuda);
      if (cpu)
        used += snprintf(dev + used, sizeof dev - (size_t)used, "%s%d cpu", used ? ", " : "", cpu);
      if (bad) snprintf(dev + used, sizeof dev - (size_t)used, " (%d unhealthy)", bad);
      pxctl_fmt_age(age, sizeof age, n->last_heartbeat_unix_ms);
      pxctl_table_cell(t, "%s", n->node_id);
      pxctl_table_cell(t, "%s", n->name);
      pxctl_table_cell(t, "%s", n->hostname);
      pxctl_table_cell(t, "%s", px_rpc_node_state_name(n->state));
      pxctl_table_cell(t, "%s", dev[0] ? dev : "none");
      pxctl_table_cell(t, "%s", n->job_id[0] ? n->job_id : "-");
      pxctl_table_cell(t, "%s", age);
    }
    pxctl_table_print(t, stdout, 0);
  }
  px_rpc_message_free(resp);
  return rc;
}

int pxctl_cmd_nodes(pxctl_opts_t *o) { return pxctl_with_channel(o, pxctl_list_nodes); }
