// SPDX-License-Identifier: GPL-2.0

//! The constants `pci_commands.rs` compares: a C expression over the kernel
//! definitions the program lifts or includes, and our value for it.

use mlx5_prm::cmd_queue::{self, DeliveryStatus};
use mlx5_prm::cmd_status::CmdStatus;
use mlx5_prm::opcode::EventType;
use mlx5_prm::{
    cmd_cq, cmd_eq, cmd_hca, cmd_res, cmd_vport, command, eqe, eqe_async, hca_cap, init_seg, qpc,
};

/// Constants: a C expression over the lifted definitions, and our value.
pub(crate) fn constants() -> Vec<(String, u64)> {
    use cmd_cq::*;
    use cmd_eq::*;
    use cmd_hca::*;
    use cmd_res::*;
    use eqe_async::*;
    use hca_cap::*;
    use init_seg::*;
    use qpc::*;

    let mut v: Vec<(String, u64)> = Vec::new();
    let mut c = |e: &str, ours: u64| v.push((e.to_string(), ours));
    for s in CmdStatus::KNOWN {
        c(&format!("MLX5_CMD_STAT_{}", s.name()), u64::from(s.raw()));
    }
    for s in DeliveryStatus::KNOWN {
        c(
            &format!("MLX5_CMD_DELIVERY_STAT_{}", s.name()),
            u64::from(s.raw()),
        );
    }
    let u = |x: u8| u64::from(x);
    let w = |x: u16| u64::from(x);
    let d = |x: u32| u64::from(x);
    let z = |x: usize| x as u64;
    // The command queue.
    c("CMD_OWNER_HW", u(cmd_queue::OWNER_HW));
    c("CMD_OWNER_SW", 0);
    c("MLX5_PCI_CMD_XPORT", u(cmd_queue::PCI_CMD_XPORT));
    c("MLX5_CMD_DATA_BLOCK_SIZE", z(cmd_queue::MAILBOX_DATA_SIZE));
    c("MLX5_MAX_COMMANDS", z(cmd_queue::MAX_COMMANDS));
    c(
        "sizeof(((struct mlx5_cmd_layout *)0)->in)",
        z(cmd_queue::INLINE_SIZE),
    );
    c(
        "sizeof(((struct mlx5_cmd_layout *)0)->out)",
        z(cmd_queue::INLINE_SIZE),
    );
    c(
        "offsetof(struct mlx5_cmd_layout, status_own)",
        z(cmd_queue::STATUS_OWN_OFFSET),
    );
    c("sizeof(struct mlx5_cmd_first)", z(cmd_queue::INLINE_SIZE));
    c("MLX5_ST_SZ_BYTES(mbox_in)", z(command::IN_HEADER_SIZE));
    c("MLX5_ST_SZ_BYTES(mbox_out)", z(command::OUT_HEADER_SIZE));
    // The initialization segment.
    c("CMD_IF_REV", w(CMDIF_REV));
    for (m, ours) in [
        ("fw_rev", FW_REV_OFFSET),
        ("cmdif_rev_fw_sub", CMDIF_REV_FW_SUB_OFFSET),
        ("cmdq_addr_h", CMDQ_ADDR_H_OFFSET),
        ("cmdq_addr_l_sz", CMDQ_ADDR_L_SZ_OFFSET),
        ("cmd_dbell", CMD_DBELL_OFFSET),
        ("initializing", INITIALIZING_OFFSET),
        ("health", HEALTH_OFFSET),
        ("cmd_exec_to", CMD_EXEC_TO_OFFSET),
        ("internal_timer_h", INTERNAL_TIMER_H_OFFSET),
        ("internal_timer_l", INTERNAL_TIMER_L_OFFSET),
        ("health_counter", HEALTH_COUNTER_OFFSET),
        ("real_time_h", REAL_TIME_H_OFFSET),
        ("real_time_l", REAL_TIME_L_OFFSET),
    ] {
        c(&format!("offsetof(struct mlx5_init_seg, {m})"), z(ours));
    }
    c("sizeof(struct mlx5_init_seg)", z(INIT_SEG_SIZE));
    c("sizeof(struct health_buffer)", z(HEALTH_BUFFER_SIZE));
    c("MLX5_FW_RESET_SUPPORTED_OFFSET", d(FW_RESET_SUPPORTED_BIT));
    c("MLX5_NIC_IFC_OFFSET", d(NIC_IFC_SHIFT));
    c("MLX5_RFR_BIT_OFFSET", u(RFR_BIT));
    c("MLX5_CRR_BIT_OFFSET", u(CRR_BIT));
    c(
        "MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_INTERNAL_ERR",
        u(HEALTH_SYNDROME_FW_INTERNAL_ERR),
    );
    c(
        "MLX5_INITIAL_SEG_HEALTH_SYNDROME_HW_FATAL_ERR",
        u(HEALTH_SYNDROME_HW_FATAL_ERR),
    );
    c(
        "MLX5_INITIAL_SEG_NIC_INTERFACE_FULL_DRIVER",
        u(NIC_IFC_FULL_DRIVER),
    );
    c(
        "MLX5_INITIAL_SEG_NIC_INTERFACE_DISABLED",
        u(NIC_IFC_DISABLED),
    );
    c(
        "MLX5_INITIAL_SEG_NIC_INTERFACE_NO_DRAM_NIC",
        u(NIC_IFC_NO_DRAM_NIC),
    );
    c(
        "MLX5_INITIAL_SEG_NIC_INTERFACE_SW_RESET",
        u(NIC_IFC_SW_RESET),
    );
    // HCA life cycle.
    c("MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES", w(QUERY_PAGES_BOOT));
    c("MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES", w(QUERY_PAGES_INIT));
    c(
        "MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES",
        w(QUERY_PAGES_REGULAR),
    );
    c(
        "MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_FAIL",
        w(MANAGE_PAGES_ALLOCATION_FAIL),
    );
    c(
        "MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS",
        w(MANAGE_PAGES_ALLOCATION_SUCCESS),
    );
    c(
        "MLX5_MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES",
        w(MANAGE_PAGES_HCA_RETURN_PAGES),
    );
    c("MLX5_PAGES_CANT_GIVE", w(MANAGE_PAGES_ALLOCATION_FAIL));
    c("MLX5_PAGES_GIVE", w(MANAGE_PAGES_ALLOCATION_SUCCESS));
    c("MLX5_PAGES_TAKE", w(MANAGE_PAGES_HCA_RETURN_PAGES));
    c(
        "MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE",
        w(TEARDOWN_GRACEFUL_CLOSE),
    );
    c(
        "MLX5_TEARDOWN_HCA_IN_PROFILE_FORCE_CLOSE",
        w(TEARDOWN_FORCE_CLOSE),
    );
    c(
        "MLX5_TEARDOWN_HCA_IN_PROFILE_PREPARE_FAST_TEARDOWN",
        w(TEARDOWN_PREPARE_FAST_TEARDOWN),
    );
    c("MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_FAIL", 1);
    // Capabilities.
    c("MLX5_CAP_GENERAL", w(CAP_GENERAL));
    c("MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE", w(CAP_GENERAL));
    c("MLX5_CAP_ODP", w(CAP_ODP));
    c("MLX5_CAP_ATOMIC", w(CAP_ATOMIC));
    c("MLX5_CAP_ROCE", w(CAP_ROCE));
    c("MLX5_CAP_GENERAL_2", w(CAP_GENERAL_2));
    c("HCA_CAP_OPMOD_GET_MAX", w(CAP_MODE_MAX));
    c("HCA_CAP_OPMOD_GET_CUR", w(CAP_MODE_CUR));
    c("MLX5_CAP_PORT_TYPE_IB", u(PORT_TYPE_IB));
    c("MLX5_CAP_PORT_TYPE_ETH", u(PORT_TYPE_ETH));
    c(
        "MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_DISABLED",
        u(CMDIF_CHECKSUM_DISABLED),
    );
    c(
        "MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_INITIAL_STATE",
        u(CMDIF_CHECKSUM_INITIAL_STATE),
    );
    c(
        "MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_ENABLED",
        u(CMDIF_CHECKSUM_ENABLED),
    );
    c("MLX5_MIN_PKEY_TABLE_SIZE", d(MIN_PKEY_TABLE_SIZE));
    c("MLX5_MAX_LOG_PKEY_TABLE", w(MAX_LOG_PKEY_TABLE));
    c("MLX5_UN_SZ_BYTES(hca_cap_union)", z(CAPABILITY_SIZE));
    c(
        "MLX5_BYTE_OFF(query_hca_cap_out, capability)",
        z(CAPABILITY_OFFSET),
    );
    c(
        "MLX5_BYTE_OFF(set_hca_cap_in, capability)",
        z(CAPABILITY_OFFSET),
    );
    // Resources and queues.
    c("MLX5_MKC_ACCESS_MODE_PA", u(ACCESS_MODE_PA));
    c("MLX5_MKC_ACCESS_MODE_MTT", u(ACCESS_MODE_MTT));
    c("MLX5_MKC_ACCESS_MODE_KLMS", u(ACCESS_MODE_KLMS));
    c("MLX5_MKC_ACCESS_MODE_KSM", u(ACCESS_MODE_KSM));
    c("MLX5_EQC_ST_ARMED", u(EQC_ST_ARMED));
    c("MLX5_EQC_ST_FIRED", u(EQC_ST_FIRED));
    c("MLX5_ADAPTER_PAGE_SHIFT", u(ADAPTER_PAGE_SHIFT));
    c("MLX5_CQC_CQE_SZ_64_BYTES", u(CQE_SZ_64));
    c("MLX5_CQC_CQE_SZ_128_BYTES", u(CQE_SZ_128));
    c(
        "MLX5_CQC_ST_SOLICITED_NOTIFICATION_REQUEST_ARMED",
        u(CQC_ST_SOLICITED_ARMED),
    );
    c("MLX5_CQC_ST_NOTIFICATION_REQUEST_ARMED", u(CQC_ST_ARMED));
    c("MLX5_CQC_ST_FIRED", u(CQC_ST_FIRED));
    c(
        "MLX5_CQ_PERIOD_MODE_START_FROM_EQE",
        u(CQ_PERIOD_MODE_START_FROM_EQE),
    );
    c(
        "MLX5_CQ_PERIOD_MODE_START_FROM_CQE",
        u(CQ_PERIOD_MODE_START_FROM_CQE),
    );
    // QP states: qp.h's enum, which mlx5_ib uses for `qpc.state`, and
    // mlx5_ifc.h's, which agrees except that it calls 0x7 SQD (qp.h:
    // SQ_DRAINING) and has no 0x5.
    for (name, ours) in [
        ("RST", STATE_RST),
        ("INIT", STATE_INIT),
        ("RTR", STATE_RTR),
        ("RTS", STATE_RTS),
        ("SQER", STATE_SQER),
        ("SQD", STATE_SQD),
        ("ERR", STATE_ERR),
        ("SQ_DRAINING", STATE_SQ_DRAINING),
        ("SUSPENDED", STATE_SUSPENDED),
    ] {
        c(&format!("MLX5_QP_STATE_{name}"), u(ours));
    }
    for (name, ours) in [
        ("RST", STATE_RST),
        ("INIT", STATE_INIT),
        ("RTR", STATE_RTR),
        ("RTS", STATE_RTS),
        ("SQER", STATE_SQER),
        ("ERR", STATE_ERR),
        ("SQD", STATE_SQ_DRAINING),
        ("SUSPENDED", STATE_SUSPENDED),
    ] {
        c(&format!("MLX5_QPC_STATE_{name}"), u(ours));
    }
    c("MLX5_QPC_ST_RC", u(ST_RC));
    c("MLX5_QPC_ST_UC", u(ST_UC));
    c("MLX5_QPC_ST_UD", u(ST_UD));
    c("MLX5_QPC_ST_XRC", u(ST_XRC));
    c("MLX5_QPC_ST_QP0", u(ST_QP0));
    c("MLX5_QPC_ST_QP1", u(ST_QP1));
    c("MLX5_QPC_PM_STATE_ARMED", u(PM_STATE_ARMED));
    c("MLX5_QPC_PM_STATE_REARM", u(PM_STATE_REARM));
    c("MLX5_QPC_PM_STATE_MIGRATED", u(PM_STATE_MIGRATED));
    c("MLX5_QP_PM_MIGRATED", u(PM_STATE_MIGRATED));
    c("MLX5_QPC_MTU_256_BYTES", u(MTU_256));
    c("MLX5_QPC_MTU_512_BYTES", u(MTU_512));
    c("MLX5_QPC_MTU_1K_BYTES", u(MTU_1K));
    c("MLX5_QPC_MTU_2K_BYTES", u(MTU_2K));
    c("MLX5_QPC_MTU_4K_BYTES", u(MTU_4K));
    c("MLX5_NON_ZERO_RQ", u(RQ_TYPE_REGULAR));
    c("MLX5_SRQ_RQ", u(RQ_TYPE_SRQ));
    c("MLX5_ZERO_LEN_RQ", u(RQ_TYPE_ZERO_LEN));
    c("MLX5_QPC_ATOMIC_MODE_IB_SPEC", u(ATOMIC_MODE_IB_SPEC));
    c("MLX5_QPC_ATOMIC_MODE_ONLY_8B", u(ATOMIC_MODE_ONLY_8B));
    c("MLX5_QPC_ATOMIC_MODE_UP_TO_8B", u(ATOMIC_MODE_UP_TO_8B));
    c(
        "MLX5_TIMESTAMP_FORMAT_FREE_RUNNING",
        u(TS_FORMAT_FREE_RUNNING),
    );
    c("MLX5_TIMESTAMP_FORMAT_DEFAULT", u(TS_FORMAT_DEFAULT));
    c("MLX5_TIMESTAMP_FORMAT_REAL_TIME", u(TS_FORMAT_REAL_TIME));
    for (name, ours) in [
        ("RRE", OPTPAR_RRE),
        ("RAE", OPTPAR_RAE),
        ("RWE", OPTPAR_RWE),
        ("PKEY_INDEX", OPTPAR_PKEY_INDEX),
        ("Q_KEY", OPTPAR_Q_KEY),
        ("RNR_TIMEOUT", OPTPAR_RNR_TIMEOUT),
        ("PRIMARY_ADDR_PATH", OPTPAR_PRIMARY_ADDR_PATH),
        ("SRA_MAX", OPTPAR_SRA_MAX),
        ("RRA_MAX", OPTPAR_RRA_MAX),
        ("PM_STATE", OPTPAR_PM_STATE),
        ("RETRY_COUNT", OPTPAR_RETRY_COUNT),
        ("RNR_RETRY", OPTPAR_RNR_RETRY),
        ("ACK_TIMEOUT", OPTPAR_ACK_TIMEOUT),
        ("PRI_PORT", OPTPAR_PRI_PORT),
    ] {
        c(&format!("MLX5_QP_OPTPAR_{name}"), d(ours));
    }
    // Events.
    c("EC_FUNCTION_MASK", w(EC_FUNCTION_MASK));
    c("RELEASE_ALL_PAGES_MASK", w(RELEASE_ALL_PAGES_MASK));
    c("MLX5_EVENT_TYPE_CMD", u(u8::from(EventType::Cmd)));
    c(
        "MLX5_EVENT_TYPE_PAGE_REQUEST",
        u(u8::from(EventType::PageRequest)),
    );
    c(
        "MLX5_EVENT_TYPE_PORT_CHANGE",
        u(u8::from(EventType::PortChange)),
    );
    c("offsetof(struct mlx5_eqe, data)", z(eqe::DATA_OFFSET));
    c("sizeof(union ev_data)", z(eqe::DATA_SIZE));
    c("MLX5_PORT_CHANGE_SUBTYPE_DOWN", u(PORT_CHANGE_DOWN));
    c("MLX5_PORT_CHANGE_SUBTYPE_ACTIVE", u(PORT_CHANGE_ACTIVE));
    c(
        "MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED",
        u(PORT_CHANGE_INITIALIZED),
    );
    c("MLX5_PORT_CHANGE_SUBTYPE_LID", u(PORT_CHANGE_LID));
    c("MLX5_PORT_CHANGE_SUBTYPE_PKEY", u(PORT_CHANGE_PKEY));
    c("MLX5_PORT_CHANGE_SUBTYPE_GUID", u(PORT_CHANGE_GUID));
    c(
        "MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG",
        u(PORT_CHANGE_CLIENT_REREG),
    );
    // Port identity (the vport commands).
    c("IB_PORT_DOWN", u(cmd_vport::PORT_STATE_DOWN));
    c("IB_PORT_INIT", u(cmd_vport::PORT_STATE_INIT));
    c("IB_PORT_ARMED", u(cmd_vport::PORT_STATE_ARMED));
    c("IB_PORT_ACTIVE", u(cmd_vport::PORT_STATE_ACTIVE));
    c("IB_PORT_PHYS_STATE_SLEEP", u(cmd_vport::PHYS_STATE_SLEEP));
    c(
        "IB_PORT_PHYS_STATE_POLLING",
        u(cmd_vport::PHYS_STATE_POLLING),
    );
    c(
        "IB_PORT_PHYS_STATE_DISABLED",
        u(cmd_vport::PHYS_STATE_DISABLED),
    );
    c(
        "IB_PORT_PHYS_STATE_LINK_UP",
        u(cmd_vport::PHYS_STATE_LINK_UP),
    );
    c("MLX5_POLICY_DOWN", u(cmd_vport::POLICY_DOWN));
    c("MLX5_POLICY_UP", u(cmd_vport::POLICY_UP));
    c("MLX5_POLICY_FOLLOW", u(cmd_vport::POLICY_FOLLOW));
    c("IB_PORT_SM", d(cmd_vport::PORT_CAP_SM));
    c(
        "IB_PORT_SYS_IMAGE_GUID_SUP",
        d(cmd_vport::PORT_CAP_SYS_IMAGE_GUID_SUP),
    );
    c("MLX5_NVPRT_LIST_TYPE_UC", u(cmd_vport::LIST_TYPE_UC));
    c("MLX5_NVPRT_LIST_TYPE_MC", u(cmd_vport::LIST_TYPE_MC));
    c("MLX5_NVPRT_LIST_TYPE_VLAN", u(cmd_vport::LIST_TYPE_VLAN));
    c("MLX5_ST_SZ_BYTES(array128_auto)", z(cmd_vport::GID_SIZE));
    v
}
