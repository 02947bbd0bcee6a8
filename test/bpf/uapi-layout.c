/*
 * Prints, as one JSON object, the uapi numbers and struct offsets that
 * src/sys/bpf-uapi.ts (and test/bpf/helpers/test-run.ts) hard-code, as this machine's /usr/include/linux/bpf.h
 * defines them. Keys are the TypeScript table paths (GROUP.name[.field]);
 * test/bpf/loader.test.ts compiles and runs this and compares key by key.
 */
#include <stddef.h>
#include <stdio.h>
#include <linux/bpf.h>
#include <asm/unistd.h>

#define KV(key, val) printf("\"%s\":%lld,", key, (long long)(val))
#define CMD(n) KV("BPF_CMD." #n, BPF_##n)
#define MAPT(n) KV("BPF_MAP_TYPE." #n, BPF_MAP_TYPE_##n)
#define ATT(n) KV("BPF_ATTACH_TYPE." #n, BPF_##n)
#define MISC(n) KV("BPF_MISC." #n, BPF_##n)
#define ATTR(group, field, member) KV("ATTR." group "." #field, offsetof(union bpf_attr, member))
#define INFO(field) KV("ATTR.MAP_INFO." #field, offsetof(struct bpf_map_info, field))
#define SKB(field) KV("ATTR.SK_BUFF." #field, offsetof(struct __sk_buff, field))

int main(void)
{
	printf("{");
	CMD(MAP_CREATE); CMD(MAP_LOOKUP_ELEM); CMD(MAP_UPDATE_ELEM); CMD(MAP_DELETE_ELEM);
	CMD(MAP_GET_NEXT_KEY); CMD(PROG_LOAD); CMD(OBJ_PIN); CMD(OBJ_GET); CMD(PROG_TEST_RUN);
	CMD(OBJ_GET_INFO_BY_FD); CMD(ITER_CREATE); CMD(LINK_CREATE); CMD(LINK_UPDATE); CMD(LINK_DETACH);
	CMD(MAP_GET_FD_BY_ID); CMD(PROG_GET_FD_BY_ID); CMD(BTF_GET_FD_BY_ID); CMD(BTF_GET_NEXT_ID); CMD(BTF_LOAD);
	CMD(MAP_LOOKUP_AND_DELETE_ELEM); CMD(MAP_LOOKUP_BATCH); CMD(MAP_LOOKUP_AND_DELETE_BATCH); CMD(MAP_UPDATE_BATCH);
	MAPT(HASH); MAPT(ARRAY); MAPT(PERCPU_HASH); MAPT(PERCPU_ARRAY); MAPT(LRU_HASH); MAPT(LPM_TRIE);
	MAPT(HASH_OF_MAPS); MAPT(ARRAY_OF_MAPS); MAPT(SOCKHASH); MAPT(QUEUE); MAPT(SK_STORAGE);
	KV("BPF_PROG_TYPE.SCHED_CLS", BPF_PROG_TYPE_SCHED_CLS);
	KV("BPF_PROG_TYPE.SOCK_OPS", BPF_PROG_TYPE_SOCK_OPS);
	KV("BPF_PROG_TYPE.SK_MSG", BPF_PROG_TYPE_SK_MSG);
	KV("BPF_PROG_TYPE.CGROUP_SOCK", BPF_PROG_TYPE_CGROUP_SOCK);
	KV("BPF_PROG_TYPE.CGROUP_SOCK_ADDR", BPF_PROG_TYPE_CGROUP_SOCK_ADDR);
	KV("BPF_PROG_TYPE.TRACING", BPF_PROG_TYPE_TRACING); ATT(TRACE_ITER);
	ATT(CGROUP_INET4_CONNECT); ATT(CGROUP_INET6_CONNECT); ATT(CGROUP_UDP4_SENDMSG); ATT(CGROUP_UDP6_SENDMSG);
	ATT(CGROUP_UDP4_RECVMSG); ATT(CGROUP_UDP6_RECVMSG); ATT(CGROUP_INET4_GETPEERNAME); ATT(CGROUP_INET6_GETPEERNAME);
	ATT(CGROUP_SOCK_OPS); ATT(SK_MSG_VERDICT); ATT(CGROUP_INET_SOCK_RELEASE);
	ATT(TCX_INGRESS); ATT(TCX_EGRESS); ATT(NETKIT_PRIMARY); ATT(NETKIT_PEER);
	MISC(PSEUDO_MAP_FD); MISC(PSEUDO_KFUNC_CALL); MISC(ANY); MISC(NOEXIST); MISC(EXIST); MISC(F_NO_PREALLOC);
	MISC(F_REPLACE); MISC(OBJ_NAME_LEN);
	KV("TCX_VERDICT.NEXT", TCX_NEXT); KV("TCX_VERDICT.PASS", TCX_PASS);
	KV("TCX_VERDICT.DROP", TCX_DROP); KV("TCX_VERDICT.REDIRECT", TCX_REDIRECT);
	KV("SIZEOF.union bpf_attr", sizeof(union bpf_attr));
	KV("SIZEOF.struct __sk_buff", sizeof(struct __sk_buff));
	KV("SIZEOF.struct bpf_map_info", sizeof(struct bpf_map_info));
	KV("SIZEOF.struct bpf_btf_info", sizeof(struct bpf_btf_info));
	KV("ATTR.PROG_INFO.id", offsetof(struct bpf_prog_info, id));
	KV("ATTR.PROG_INFO.name", offsetof(struct bpf_prog_info, name));
	KV("ATTR.PROG_INFO.jited_prog_len", offsetof(struct bpf_prog_info, jited_prog_len));
	KV("ATTR.PROG_INFO.verified_insns", offsetof(struct bpf_prog_info, verified_insns));

	ATTR("MAP_CREATE", map_type, map_type); ATTR("MAP_CREATE", key_size, key_size);
	ATTR("MAP_CREATE", value_size, value_size); ATTR("MAP_CREATE", max_entries, max_entries);
	ATTR("MAP_CREATE", map_flags, map_flags); ATTR("MAP_CREATE", map_name, map_name);
	ATTR("MAP_CREATE", inner_map_fd, inner_map_fd); ATTR("MAP_CREATE", btf_fd, btf_fd);
	ATTR("MAP_CREATE", btf_key_type_id, btf_key_type_id);
	ATTR("MAP_CREATE", btf_value_type_id, btf_value_type_id);
	ATTR("BTF_LOAD", btf, btf); ATTR("BTF_LOAD", btf_log_buf, btf_log_buf); ATTR("BTF_LOAD", btf_size, btf_size);
	ATTR("BTF_LOAD", btf_log_size, btf_log_size); ATTR("BTF_LOAD", btf_log_level, btf_log_level);
	ATTR("MAP_ELEM", map_fd, map_fd); ATTR("MAP_ELEM", key, key); ATTR("MAP_ELEM", value, value);
	ATTR("MAP_ELEM", next_key, next_key); ATTR("MAP_ELEM", flags, flags);
	ATTR("BATCH", in_batch, batch.in_batch); ATTR("BATCH", out_batch, batch.out_batch);
	ATTR("BATCH", keys, batch.keys); ATTR("BATCH", values, batch.values);
	ATTR("BATCH", count, batch.count); ATTR("BATCH", map_fd, batch.map_fd);
	ATTR("BATCH", elem_flags, batch.elem_flags); ATTR("BATCH", flags, batch.flags);
	ATTR("PROG_LOAD", prog_type, prog_type); ATTR("PROG_LOAD", insn_cnt, insn_cnt);
	ATTR("PROG_LOAD", insns, insns); ATTR("PROG_LOAD", license, license);
	ATTR("PROG_LOAD", log_level, log_level); ATTR("PROG_LOAD", log_size, log_size);
	ATTR("PROG_LOAD", log_buf, log_buf); ATTR("PROG_LOAD", prog_name, prog_name);
	ATTR("PROG_LOAD", expected_attach_type, expected_attach_type);
	ATTR("PROG_LOAD", attach_btf_id, attach_btf_id);
	ATTR("ITER_CREATE", link_fd, iter_create.link_fd); ATTR("ITER_CREATE", flags, iter_create.flags);
	ATTR("PROG_LOAD", log_true_size, log_true_size); ATTR("PROG_LOAD", fd_array, fd_array);
	ATTR("GET_ID", start_id, start_id); ATTR("GET_ID", next_id, next_id);
	ATTR("GET_ID", open_flags, open_flags);
	KV("ATTR.BTF_INFO.btf", offsetof(struct bpf_btf_info, btf));
	KV("ATTR.BTF_INFO.btf_size", offsetof(struct bpf_btf_info, btf_size));
	KV("ATTR.BTF_INFO.id", offsetof(struct bpf_btf_info, id));
	KV("ATTR.BTF_INFO.name", offsetof(struct bpf_btf_info, name));
	KV("ATTR.BTF_INFO.name_len", offsetof(struct bpf_btf_info, name_len));
	KV("ATTR.BTF_INFO.kernel_btf", offsetof(struct bpf_btf_info, kernel_btf));
	ATTR("OBJ", pathname, pathname); ATTR("OBJ", bpf_fd, bpf_fd); ATTR("OBJ", file_flags, file_flags);
	ATTR("TEST", prog_fd, test.prog_fd); ATTR("TEST", retval, test.retval);
	ATTR("TEST", data_size_in, test.data_size_in); ATTR("TEST", data_size_out, test.data_size_out);
	ATTR("TEST", data_in, test.data_in); ATTR("TEST", data_out, test.data_out);
	ATTR("TEST", repeat, test.repeat); ATTR("TEST", duration, test.duration);
	ATTR("TEST", ctx_size_in, test.ctx_size_in); ATTR("TEST", ctx_size_out, test.ctx_size_out);
	ATTR("TEST", ctx_in, test.ctx_in); ATTR("TEST", ctx_out, test.ctx_out);
	ATTR("INFO", bpf_fd, info.bpf_fd); ATTR("INFO", info_len, info.info_len); ATTR("INFO", info, info.info);
	ATTR("LINK_CREATE", prog_fd, link_create.prog_fd);
	ATTR("LINK_CREATE", target_ifindex, link_create.target_ifindex);
	ATTR("LINK_CREATE", target_fd, link_create.target_fd);
	ATTR("LINK_CREATE", attach_type, link_create.attach_type);
	ATTR("LINK_CREATE", flags, link_create.flags);
	ATTR("LINK_CREATE", relative_fd, link_create.tcx.relative_fd);
	ATTR("LINK_CREATE", expected_revision, link_create.tcx.expected_revision);
	ATTR("LINK_UPDATE", link_fd, link_update.link_fd); ATTR("LINK_UPDATE", new_prog_fd, link_update.new_prog_fd);
	ATTR("LINK_UPDATE", flags, link_update.flags); ATTR("LINK_UPDATE", old_prog_fd, link_update.old_prog_fd);
	ATTR("LINK_DETACH", link_fd, link_detach.link_fd);
	INFO(type); INFO(id); INFO(key_size); INFO(value_size); INFO(max_entries); INFO(map_flags); INFO(name);
	SKB(mark); SKB(ingress_ifindex); SKB(ifindex); SKB(tstamp); SKB(tstamp_type);
	/* netkit links take the same relative_fd slot as tcx. */
	KV("netkit.relative_fd", offsetof(union bpf_attr, link_create.netkit.relative_fd));
	KV("SYS.bpf", __NR_bpf);
	printf("\"end\":0}\n");
	return 0;
}
