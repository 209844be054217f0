#!/usr/bin/python3
"""A second gRPC implementation against pxcoordd (tests/test_coord_grpcio.c).

Python's grpcio (Debian's python3-grpcio) with message classes that protoc
generated from proto/prunex.proto at test time; no grpc_tools stubs, only
channel.unary_unary with the generated classes' own (de)serialisers, so the
bytes on the wire are the reference protobuf implementation's, not
protobuf-c's.

    grpcio_client.py PORT PB2_DIR [CA_FILE TOKEN]

With CA_FILE and TOKEN it speaks TLS (verifying the daemon against
CA_FILE) and sends `authorization: Bearer TOKEN` on every call, as pxctl
does; it also makes one call without the token and records the
status. Submits a valid job and an invalid one, lists the jobs (all, and
PENDING with limit 1), gets an unknown job, and prints one JSON line (UTF-8)
of what it saw. It judges nothing: the C test checks the line. Exit status 0
when every call got an answer (an error status is an answer), 1 when the
channel never became ready or a call failed for another reason.
"""
import json
import sys

JOB_NAME = "grpcio-j\u00f6b"  # non-ASCII on purpose: UTF-8 through both stacks
SPEC_YAML = ("# submitted by tests/grpcio_client.py \u2014 Python grpcio\n"
             "name: " + JOB_NAME + "\nstrategy: hsadmm\n")
DEADLINE_S = 10.0


def main():
    if len(sys.argv) not in (3, 5):
        sys.stderr.write("usage: grpcio_client.py PORT PB2_DIR [CA_FILE TOKEN]\n")
        return 2
    port, pb2_dir = sys.argv[1], sys.argv[2]
    ca_file, token = (sys.argv[3], sys.argv[4]) if len(sys.argv) == 5 else (None, None)
    sys.path.insert(0, pb2_dir)
    import grpc
    import google.protobuf
    import prunex_pb2 as pb

    # No proxy, whatever the environment says: the daemon is on loopback.
    options = [("grpc.enable_http_proxy", 0)]
    if ca_file:
        with open(ca_file, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel("127.0.0.1:" + port, creds, options=options)
    else:
        channel = grpc.insecure_channel("127.0.0.1:" + port, options=options)
    metadata = [("authorization", "Bearer " + token)] if token else None
    try:
        grpc.channel_ready_future(channel).result(timeout=DEADLINE_S)
    except grpc.FutureTimeoutError:
        sys.stderr.write("grpcio_client: 127.0.0.1:%s not ready in %.0f s\n" % (port, DEADLINE_S))
        return 1

    def method(name, req_cls, resp_cls):
        return channel.unary_unary("/prunex.v1.Jobs/" + name,
                                   request_serializer=req_cls.SerializeToString,
                                   response_deserializer=resp_cls.FromString)

    submit = method("SubmitJob", pb.SubmitJobRequest, pb.SubmitJobResponse)
    list_jobs = method("ListJobs", pb.ListJobsRequest, pb.ListJobsResponse)
    get_job = method("GetJob", pb.GetJobRequest, pb.Job)

    def call(fn, req, with_token=True):
        """(response, None) or (None, (code name, details)) for a status."""
        try:
            return fn(req, timeout=DEADLINE_S, metadata=metadata if with_token else None), None
        except grpc.RpcError as e:
            return None, (e.code().name, e.details() or "")

    seen = {"grpc_version": grpc.__version__, "protobuf_version": google.protobuf.__version__,
            "tls": bool(ca_file)}
    if token:
        resp, err = call(list_jobs, pb.ListJobsRequest(), with_token=False)
        seen["no_token_code"] = err[0] if err else "OK"

    req = pb.SubmitJobRequest(spec_yaml=SPEC_YAML)
    spec = req.spec
    spec.name = JOB_NAME
    spec.strategy = pb.STRATEGY_HSADMM
    spec.model.name = "resnet20"
    spec.dataset.name = "fashion-mnist"
    spec.cluster.nodes = 1
    spec.cluster.workers_per_node = 1
    spec.cluster.device = "cpu"
    spec.train.epochs = 1
    spec.train.batch_size = 64
    spec.train.lr = 0.05
    spec.train.momentum = 0.9
    spec.train.seed = 2**63 + 5  # uint64 above INT64_MAX
    spec.prune.filter_keep = 0.5
    spec.prune.skip_layers.extend(["conv1", "fc"])
    spec.admm.rho1 = 0.5
    spec.admm.rho2 = 0.25
    spec.admm.max_iterations = 7
    resp, err = call(submit, req)
    if err:
        sys.stderr.write("grpcio_client: SubmitJob: %s: %s\n" % err)
        return 1
    seen["submitted_job_id"] = resp.job_id

    bad = pb.SubmitJobRequest()
    bad.CopyFrom(req)
    bad.spec.cluster.nodes = 0
    resp, err = call(submit, bad)
    seen["invalid_submit_code"] = err[0] if err else "OK"
    seen["invalid_submit_details"] = err[1] if err else ""

    resp, err = call(list_jobs, pb.ListJobsRequest(include_spec_yaml=True))
    if err:
        sys.stderr.write("grpcio_client: ListJobs: %s: %s\n" % err)
        return 1
    seen["jobs"] = [{
        "job_id": j.job_id,
        "name": j.name,
        "state": pb.JobState.Name(j.state),
        "model": j.spec.model.name,
        "dataset": j.spec.dataset.name,
        "nodes": j.spec.cluster.nodes,
        "workers_per_node": j.spec.cluster.workers_per_node,
        "strategy": pb.Strategy.Name(j.spec.strategy),
        "seed": str(j.spec.train.seed),
        "skip_layers": ",".join(j.spec.prune.skip_layers),
        "rho2": j.spec.admm.rho2,
        "spec_yaml_matches": j.spec_yaml == SPEC_YAML,
        "created_unix_ms": j.created_unix_ms,
        "events": len(j.events),
    } for j in resp.jobs]

    resp, err = call(list_jobs, pb.ListJobsRequest(state=pb.JOB_STATE_PENDING, limit=1))
    if err:
        sys.stderr.write("grpcio_client: ListJobs(PENDING, 1): %s: %s\n" % err)
        return 1
    seen["pending_limit_1"] = [j.job_id for j in resp.jobs]

    resp, err = call(get_job, pb.GetJobRequest(job_id="job-999999"))
    seen["unknown_get_code"] = err[0] if err else "OK"
    seen["unknown_get_details"] = err[1] if err else ""

    channel.close()
    out = json.dumps(seen, ensure_ascii=False, separators=(", ", ": "))
    sys.stdout.buffer.write(out.encode("utf-8") + b"\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
