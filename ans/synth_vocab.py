"""Vocabularies and templates for synthetic catalogs (used by :mod:`ans.synth`).

Fifty capability domains, each with its own verbs (for agent text), query
verbs (different words, for paraphrased DISCOVER intents), objects, focus
points, artefacts, tools, modalities, tags, label words and example-task
templates with ``{slot}`` placeholders; plus the governance zones, the
org-name parts, and the sentence and query templates. Pure data: no RNG,
no I/O. Lists are written as ``"a|b|c"`` strings and split once.
"""

from __future__ import annotations

from dataclasses import dataclass


def _split(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split("|") if p.strip())


@dataclass(frozen=True, slots=True)
class Domain:
    """One capability domain: everything needed to write agents and queries about it."""

    key: str
    name: str
    group: str
    zones: tuple[str, ...]
    scopes: tuple[str, ...]
    methods: tuple[str, ...]
    verbs: tuple[str, ...]
    qverbs: tuple[str, ...]
    objects: tuple[str, ...]
    focus: tuple[str, ...]
    artefacts: tuple[str, ...]
    tools: tuple[str, ...]
    modalities: tuple[str, ...]
    tags: tuple[str, ...]
    label_words: tuple[str, ...]
    examples: tuple[str, ...]


def D(
    key: str,
    name: str,
    group: str,
    *,
    zones: str,
    scopes: str,
    methods: str,
    verbs: str,
    qverbs: str,
    objects: str,
    focus: str,
    artefacts: str,
    tools: str,
    modalities: str,
    tags: str,
    label: str,
    examples: tuple[str, ...],
) -> Domain:
    return Domain(
        key=key,
        name=name,
        group=group,
        zones=tuple(f"zone:{z}" for z in zones.split()),
        scopes=tuple(scopes.split()),
        methods=tuple(methods.split()),
        verbs=_split(verbs),
        qverbs=_split(qverbs),
        objects=_split(objects),
        focus=_split(focus),
        artefacts=_split(artefacts),
        tools=_split(tools),
        modalities=_split(modalities),
        tags=_split(tags),
        label_words=_split(label),
        examples=examples,
    )


# Twelve governance zones; each domain lists the ones its agents usually sit in.
ZONES: tuple[str, ...] = (
    "zone:finance",
    "zone:health",
    "zone:legal",
    "zone:public",
    "zone:partner",
    "zone:internal",
    "zone:research",
    "zone:government",
    "zone:education",
    "zone:retail",
    "zone:industrial",
    "zone:eu",
)

DOMAINS: tuple[Domain, ...] = (
    D(
        "smart-contract-audit",
        "smart-contract audit",
        "finance",
        zones="finance partner",
        scopes="audit:read code:analyze",
        methods="ANALYZE VALIDATE REPORT QUERY",
        verbs="audit|review|scan|fuzz-test",
        qverbs="look over|vet|pentest|sanity-check|go through",
        objects="Solidity contracts|Vyper contracts|DeFi lending pools|ERC-20 token contracts|"
        "upgradeable proxy contracts|NFT marketplace contracts|cross-chain bridges",
        focus="reentrancy|integer overflow|access-control misconfiguration|oracle manipulation|"
        "front-running|storage slot collisions|unchecked external calls",
        artefacts="severity-ranked findings report|audit summary|gas optimisation memo|"
        "remediation checklist",
        tools="slither|mythril|foundry|echidna|certora prover|hardhat",
        modalities="text|code",
        tags="smart-contracts|security-audit|solidity|defi|blockchain|web3",
        label="Solidity|Chain|Contract|Vault|Ledger|Audit|Bytecode",
        examples=(
            "Review the {object} at commit {hash} for {focus} and list findings by severity.",
            "Check whether our {object} are exposed to {focus} after the latest upgrade.",
            "Produce a {artefact} for the staking module before the {date} launch.",
            "Run {tool} over the {object} and triage every high-severity finding.",
            "Compare V1 and V2 of the {object} and flag {focus} introduced by the change.",
        ),
    ),
    D(
        "invoice-processing",
        "invoice processing",
        "finance",
        zones="finance internal",
        scopes="invoices:read payments:prepare",
        methods="QUERY EXTRACT VALIDATE REPORT",
        verbs="extract line items from|match|reconcile|code",
        qverbs="read|key in|sort out|clear",
        objects="supplier invoices|PDF invoices|scanned receipts|purchase orders|credit notes|"
        "utility bills",
        focus="three-way matching|VAT amounts|duplicate invoices|payment terms|cost-centre coding|"
        "currency conversion",
        artefacts="approved payables batch|exception list|ERP import file|aging report",
        tools="SAP Concur|Coupa|NetSuite|Tesseract OCR|Xero|Basware",
        modalities="text|pdf|image|tabular",
        tags="invoice-processing|accounts-payable|ocr|erp|finance-ops",
        label="Invoice|Payable|Ledger|Bill|Docu|Capture",
        examples=(
            "Extract totals and VAT from these {n} {object} and post them to {tool}.",
            "Flag {focus} problems in the {period} batch of {object}.",
            "Match invoice {ref} against its purchase order and goods receipt.",
            "Prepare an {artefact} for all {object} due before {date}.",
            "Detect duplicate {object} submitted by {company} in {period}.",
        ),
    ),
    D(
        "contract-law-review",
        "contract law review",
        "legal",
        zones="legal partner eu",
        scopes="legal:review documents:read",
        methods="ANALYZE SUMMARIZE REPORT QUERY",
        verbs="review|redline|summarize|compare",
        qverbs="go over|mark up|check|vet",
        objects="master services agreements|NDAs|supplier contracts|SaaS subscription terms|"
        "employment contracts|licence agreements|data processing addenda",
        focus="indemnity clauses|limitation of liability|termination rights|governing law|"
        "auto-renewal terms|IP assignment|non-compete provisions",
        artefacts="clause-by-clause risk memo|redlined draft|negotiation playbook|"
        "obligations table",
        tools="Ironclad|DocuSign CLM|Kira|Word track changes|Luminance",
        modalities="text|pdf",
        tags="contract-review|legal|clauses|negotiation|compliance",
        label="Clause|Contract|Lex|Counsel|Redline|Covenant",
        examples=(
            "Redline the {object} from {company} against our standard playbook.",
            "Summarize the {focus} in these {n} {object} for the general counsel.",
            "Write a {artefact} for the renewal of contract {ref}.",
            "Compare {focus} across the {object} signed in {period}.",
            "List every obligation with a deadline in the {object} governed by {country} law.",
        ),
    ),
    D(
        "radiology-report-triage",
        "radiology report triage",
        "health",
        zones="health research",
        scopes="clinical:read reports:classify",
        methods="ANALYZE CLASSIFY ESCALATE REPORT",
        verbs="triage|prioritize|classify|summarize",
        qverbs="sort|rank by urgency|screen|go through",
        objects="CT reports|chest X-ray reports|MRI reports|mammography reports|"
        "ultrasound findings|PET-CT reads",
        focus="critical findings|incidental nodules|pulmonary embolism|follow-up recommendations|"
        "BI-RADS categories|stroke signs",
        artefacts="urgency worklist|critical-result alert|follow-up tracker|structured summary",
        tools="PACS|HL7 FHIR|RadLex|DICOM router|Nuance PowerScribe",
        modalities="text|dicom|image",
        tags="radiology|triage|clinical-nlp|healthcare|imaging",
        label="Radio|Scan|Imaging|Lumen|Rad|Thorax",
        examples=(
            "Sort today's {n} {object} by urgency and page the radiologist for {focus}.",
            "Find {focus} in the {object} from the {region} hospital network.",
            "Build a {artefact} for patients with {focus} in {period}.",
            "Extract {focus} from these {object} into a {artefact}.",
            "Check which {object} mention {focus} but have no scheduled follow-up.",
        ),
    ),
    D(
        "supply-chain-forecasting",
        "supply-chain forecasting",
        "ops",
        zones="industrial partner retail",
        scopes="inventory:read forecasts:write",
        methods="ANALYZE FORECAST REPORT QUERY",
        verbs="forecast|plan|model|simulate",
        qverbs="predict|project|estimate|work out",
        objects="SKU-level demand|supplier lead times|safety stock|container shipments|"
        "regional distribution centres|seasonal promotions",
        focus="stock-outs|bullwhip effects|port congestion|supplier delays|overstock|demand spikes",
        artefacts="weekly demand forecast|replenishment plan|scenario comparison|risk heat map",
        tools="Prophet|SAP IBP|Kinaxis|pandas|o9|Blue Yonder",
        modalities="tabular|text|time-series",
        tags="forecasting|supply-chain|inventory|demand-planning|logistics",
        label="Supply|Demand|Forecast|Cargo|Stock|Horizon",
        examples=(
            "Forecast {object} for the next {n} weeks in {region}.",
            "Simulate the impact of {focus} on {object} for {period}.",
            "Produce a {artefact} that avoids {focus} during the holiday season.",
            "Estimate how {focus} will change {object} after switching supplier to {company}.",
            "Explain why last quarter's forecast missed {object} by {pct}.",
        ),
    ),
    D(
        "customer-support-triage",
        "customer-support triage",
        "customer",
        zones="public retail partner",
        scopes="tickets:read tickets:route",
        methods="CLASSIFY ESCALATE SUMMARIZE NOTIFY",
        verbs="triage|route|tag|draft replies to",
        qverbs="sort|assign|answer|deal with",
        objects="support tickets|live-chat transcripts|customer emails|app-store reviews|"
        "refund requests|social media complaints",
        focus="sentiment|urgency|product area|churn risk|SLA breaches|language",
        artefacts="routed ticket queue|suggested reply|weekly issue digest|escalation note",
        tools="Zendesk|Intercom|Freshdesk|Salesforce Service Cloud|Jira Service Management",
        modalities="text|email",
        tags="customer-support|triage|helpdesk|ticket-routing|cx",
        label="Support|Helpdesk|Ticket|Care|Reply|Desk",
        examples=(
            "Route the {n} open {object} in {tool} by {focus}.",
            "Draft a {artefact} for ticket {ref} about a double charge.",
            "Find {object} that are close to {focus} and escalate them.",
            "Summarize this week's {object} into a {artefact} for the product team.",
            "Tag incoming {object} written in {lang} and send them to the right queue.",
        ),
    ),
    D(
        "translation-localization",
        "translation and localization",
        "media",
        zones="public partner eu",
        scopes="documents:read documents:translate",
        methods="TRANSLATE QUERY VALIDATE",
        verbs="translate|localize|proofread|adapt",
        qverbs="render|convert|put into|carry over",
        objects="product manuals|marketing pages|mobile app strings|legal notices|"
        "subtitles|support articles|UI copy",
        focus="terminology consistency|tone of voice|right-to-left layout|plural forms|"
        "regional spelling|character limits",
        artefacts="translated file|translation memory update|glossary|QA report",
        tools="DeepL|memoQ|Phrase|Crowdin|Trados|gettext",
        modalities="text|audio",
        tags="translation|localization|i18n|multilingual|l10n",
        label="Lingo|Polyglot|Babel|Locale|Transl|Verba",
        examples=(
            "Translate the {object} into {lang} keeping {focus}.",
            "Localize our {object} for {region} and respect {focus}.",
            "Proofread the {lang} version of the {object} and return a {artefact}.",
            "Update the {artefact} with {n} new terms from release {ref}.",
            "Adapt {object} from English to {lang} for a {region} audience.",
        ),
    ),
    D(
        "code-review",
        "code review",
        "tech",
        zones="internal partner",
        scopes="code:read code:analyze",
        methods="ANALYZE REVIEW REPORT",
        verbs="review|lint|refactor|comment on",
        qverbs="look at|critique|clean up|check",
        objects="pull requests|Python services|TypeScript front-ends|Go microservices|"
        "Rust crates|Terraform modules|Java monoliths",
        focus="race conditions|missing tests|API breaking changes|performance regressions|"
        "naming and readability|error handling",
        artefacts="review comment thread|refactoring plan|test coverage report|change summary",
        tools="GitHub|GitLab|ruff|SonarQube|ESLint|clippy",
        modalities="code|text",
        tags="code-review|software-engineering|refactoring|static-analysis",
        label="Code|Review|Diff|Merge|Commit|Patch",
        examples=(
            "Review pull request #{n} in the payments repo and point out {focus}.",
            "Suggest a {artefact} for the {object} flagged by {tool}.",
            "Check the {object} changed in {ref} for {focus}.",
            "Write a {artefact} for the diff between {hash} and main.",
            "Find {focus} in our {object} before the {date} release.",
        ),
    ),
    D(
        "security-incident-response",
        "security incident response",
        "security",
        zones="internal partner government",
        scopes="security:investigate logs:read",
        methods="ANALYZE ESCALATE CONTAIN REPORT",
        verbs="investigate|contain|correlate alerts from|write timelines for",
        qverbs="dig into|respond to|handle|chase down",
        objects="phishing campaigns|ransomware alerts|EDR detections|suspicious logins|"
        "cloud audit logs|compromised credentials",
        focus="lateral movement|data exfiltration|persistence mechanisms|initial access|"
        "privilege escalation|command-and-control traffic",
        artefacts="incident timeline|containment playbook|IOC list|post-incident report",
        tools="Splunk|Microsoft Sentinel|CrowdStrike Falcon|Velociraptor|TheHive|Zeek",
        modalities="text|logs",
        tags="incident-response|security|soc|dfir|threat-hunting",
        label="Sentinel|Breach|Guard|Signal|Cyber|Watch",
        examples=(
            "Investigate the {object} from {date} and check for {focus}.",
            "Build an {artefact} for incident {ref} using {tool} data.",
            "Correlate {n} {object} and tell me whether they show {focus}.",
            "Draft a {artefact} for the {object} that hit the {region} office.",
            "Hunt for {focus} across {object} from the last {n} days.",
        ),
    ),
    D(
        "tax-filing",
        "tax filing",
        "finance",
        zones="finance public government",
        scopes="tax:prepare documents:read",
        methods="QUERY PREPARE VALIDATE SUBMIT",
        verbs="prepare|file|reconcile|check",
        qverbs="do|sort out|fill in|submit",
        objects="VAT returns|corporate income tax returns|payroll tax filings|"
        "sales tax nexus reports|transfer-pricing files|1099 forms",
        focus="deductible expenses|filing deadlines|cross-border VAT|withholding tax|"
        "tax credits|late-payment penalties",
        artefacts="draft return|filing calendar|reconciliation workpaper|audit-ready pack",
        tools="Avalara|Vertex|HMRC MTD API|TurboTax Business|Thomson Reuters ONESOURCE",
        modalities="text|tabular|pdf",
        tags="tax|vat|compliance|accounting|filing",
        label="Tax|Fiscal|Levy|Return|Duty|Tariff",
        examples=(
            "Prepare the {period} {object} for our {country} entity.",
            "Check our {object} for {focus} before submitting through {tool}.",
            "Build a {artefact} covering all {object} due in {period}.",
            "Reconcile {object} with the general ledger and explain differences over {pct}.",
            "Estimate {focus} for {company} across {n} jurisdictions.",
        ),
    ),
    D(
        "hr-onboarding",
        "HR onboarding",
        "people",
        zones="internal",
        scopes="hr:read accounts:provision",
        methods="SCHEDULE NOTIFY QUERY CONFIRM",
        verbs="onboard|provision accounts for|schedule training for|collect documents from",
        qverbs="set up|welcome|get ready|bring on board",
        objects="new hires|contractors|interns|remote engineers|store staff|returning employees",
        focus="right-to-work checks|laptop shipping|benefits enrolment|mandatory training|"
        "access requests|buddy assignments",
        artefacts="onboarding checklist|first-week schedule|equipment order|welcome pack",
        tools="Workday|BambooHR|Okta|ServiceNow|Slack|Rippling",
        modalities="text|email",
        tags="hr|onboarding|employee-experience|it-provisioning",
        label="Onboard|Welcome|People|Crew|Talent|Roster",
        examples=(
            "Onboard the {n} {object} starting on {date} and handle {focus}.",
            "Create an {artefact} for {object} joining the {region} office.",
            "Chase {focus} for new hire {ref} in {tool}.",
            "Schedule {focus} for all {object} hired in {period}.",
            "Send a {artefact} to {object} before their first day.",
        ),
    ),
    D(
        "travel-booking",
        "travel booking",
        "travel",
        zones="public partner",
        scopes="travel:book payments:authorize",
        methods="BOOK QUERY CONFIRM CANCEL",
        verbs="book|rebook|plan|compare fares for",
        qverbs="arrange|reserve|organise|sort out",
        objects="business trips|flights|hotel stays|rail journeys|conference travel|"
        "group offsites|rental cars",
        focus="travel policy limits|cheapest refundable fares|loyalty programmes|"
        "visa requirements|carbon footprint|tight connections",
        artefacts="itinerary|booking confirmation|expense-ready receipt bundle|disruption plan",
        tools="Amadeus|Sabre|Navan|Booking.com API|SAP Concur Travel",
        modalities="text|email",
        tags="travel|booking|itinerary|corporate-travel",
        label="Trip|Voyage|Jet|Route|Travel|Compass",
        examples=(
            "Book {object} to {city} for {n} people on {date} within {focus}.",
            "Rebook my cancelled flight {ref} and keep {focus} in mind.",
            "Plan {object} for the {city} sales kickoff and send an {artefact}.",
            "Compare {object} from {city} to {city2} considering {focus}.",
            "Build an {artefact} for the team trip to {city} in {period}.",
        ),
    ),
    D(
        "clinical-trial-matching",
        "clinical trial matching",
        "health",
        zones="health research",
        scopes="clinical:read trials:match",
        methods="QUERY MATCH REPORT",
        verbs="match|screen|pre-qualify|shortlist",
        qverbs="find trials for|pair|check eligibility of|connect",
        objects="oncology patients|rare-disease patients|cardiology cohorts|"
        "paediatric patients|diabetes registries",
        focus="inclusion criteria|exclusion criteria|biomarker status|prior lines of therapy|"
        "travel distance to sites|ECOG performance status",
        artefacts="eligibility shortlist|criteria checklist|site referral letter|screening log",
        tools="ClinicalTrials.gov API|FHIR|OMOP CDM|Epic|TriNetX",
        modalities="text|tabular",
        tags="clinical-trials|patient-matching|oncology|healthcare",
        label="Trial|Cohort|Cure|Match|Onco|Helix",
        examples=(
            "Match {object} in {region} to open phase II trials using {focus}.",
            "Screen patient record {ref} against the {focus} of trial NCT0{n}.",
            "Build an {artefact} of {object} near {city}.",
            "Check {focus} for the {n} {object} referred in {period}.",
            "Write a {artefact} for a patient with EGFR-positive lung cancer.",
        ),
    ),
    D(
        "fraud-detection",
        "fraud detection",
        "finance",
        zones="finance partner",
        scopes="transactions:read risk:score",
        methods="ANALYZE SCORE ESCALATE REPORT",
        verbs="detect|score|investigate|flag",
        qverbs="catch|spot|uncover|stop",
        objects="card transactions|account takeovers|merchant chargebacks|insurance claims|"
        "loan applications|promo abuse",
        focus="velocity anomalies|synthetic identities|device fingerprints|mule accounts|"
        "geolocation mismatches|collusion rings",
        artefacts="risk score|case file|alert queue|fraud ring graph",
        tools="Featurespace|SAS Fraud|Neo4j|XGBoost|Sift|Kafka streams",
        modalities="tabular|text|graph",
        tags="fraud-detection|risk|anomaly-detection|payments",
        label="Fraud|Risk|Shield|Sentry|Trust|Radar",
        examples=(
            "Score these {n} {object} for {focus}.",
            "Investigate {object} linked to customer {ref} and build a {artefact}.",
            "Find {focus} in {object} from {period}.",
            "Explain why {object} from {region} spiked by {pct} last week.",
            "Build a {artefact} of accounts sharing {focus}.",
        ),
    ),
    D(
        "kyc-aml-screening",
        "KYC and AML screening",
        "finance",
        zones="finance legal eu",
        scopes="customers:read compliance:screen",
        methods="VALIDATE SCREEN ESCALATE REPORT",
        verbs="screen|verify|monitor|risk-rate",
        qverbs="vet|check out|run checks on|clear",
        objects="new business customers|beneficial owners|wire transfers|"
        "politically exposed persons|correspondent banks|crypto withdrawals",
        focus="sanctions list hits|adverse media|source of funds|structuring patterns|"
        "ownership chains|high-risk jurisdictions",
        artefacts="customer due diligence file|suspicious activity report draft|"
        "risk rating|screening audit trail",
        tools="World-Check|ComplyAdvantage|Dow Jones Risk|LexisNexis Bridger|Chainalysis",
        modalities="text|tabular",
        tags="kyc|aml|sanctions|compliance|onboarding",
        label="Comply|Verify|Sanction|Kyc|Identity|Beacon",
        examples=(
            "Screen {object} against {focus} and document the result.",
            "Prepare a {artefact} for customer {ref}.",
            "Monitor {object} over {amount} for {focus}.",
            "Trace the {focus} of {company} up to the ultimate owners.",
            "Re-screen all {object} onboarded in {period} after the sanctions update.",
        ),
    ),
    D(
        "expense-auditing",
        "expense auditing",
        "finance",
        zones="finance internal",
        scopes="expenses:read expenses:approve",
        methods="VALIDATE REPORT QUERY",
        verbs="audit|approve|categorize|spot-check",
        qverbs="go through|vet|check|review",
        objects="expense reports|corporate card statements|mileage claims|per-diem claims|"
        "client entertainment receipts",
        focus="policy violations|duplicate receipts|weekend spending|missing receipts|"
        "split transactions|out-of-policy hotels",
        artefacts="exceptions report|approval batch|policy breach summary|reimbursement file",
        tools="SAP Concur|Expensify|Emburse|Brex|Ramp",
        modalities="text|image|tabular",
        tags="expenses|audit|policy-compliance|finance-ops",
        label="Expense|Receipt|Spend|Claim|Audit|Tally",
        examples=(
            "Audit the {period} {object} for {focus}.",
            "Build an {artefact} of all {object} from the {region} sales team.",
            "Check report {ref} for {focus} and approve if clean.",
            "Categorize {n} {object} exported from {tool}.",
            "Find employees with repeated {focus} in {period}.",
        ),
    ),
    D(
        "financial-close",
        "month-end financial close",
        "finance",
        zones="finance internal",
        scopes="ledger:read ledger:post",
        methods="RECONCILE REPORT VALIDATE",
        verbs="reconcile|accrue|consolidate|close",
        qverbs="tie out|balance|wrap up|square",
        objects="bank accounts|intercompany balances|subledgers|fixed-asset registers|"
        "revenue schedules|prepaid expenses",
        focus="unreconciled items|FX revaluation|cut-off errors|deferred revenue|"
        "manual journal entries|variance explanations",
        artefacts="close checklist|reconciliation pack|flux analysis|consolidated trial balance",
        tools="BlackLine|Oracle Fusion|NetSuite|Excel|FloQast",
        modalities="tabular|text",
        tags="financial-close|accounting|reconciliation|reporting",
        label="Close|Ledger|Balance|Journal|Account|Tally",
        examples=(
            "Reconcile the {object} for {period} and list {focus}.",
            "Prepare the {artefact} for entity {ref}.",
            "Explain {focus} above {pct} in the {period} numbers.",
            "Consolidate {object} for {n} subsidiaries in {tool}.",
            "Post accruals for {object} and document {focus}.",
        ),
    ),
    D(
        "credit-risk-scoring",
        "credit risk scoring",
        "finance",
        zones="finance partner eu",
        scopes="credit:read risk:score",
        methods="SCORE ANALYZE REPORT",
        verbs="score|underwrite|stress-test|rate",
        qverbs="assess|judge|grade|size up",
        objects="SME loan applications|mortgage files|consumer credit lines|"
        "trade-credit customers|corporate bond issuers",
        focus="probability of default|debt-service coverage|cash-flow volatility|"
        "collateral value|payment history|sector exposure",
        artefacts="credit memo|scorecard|limit recommendation|stress-test report",
        tools="Moody's Analytics|scikit-learn|Experian API|SAS|FICO Blaze",
        modalities="tabular|text|pdf",
        tags="credit-risk|underwriting|lending|scoring",
        label="Credit|Lend|Score|Rating|Capital|Prudence",
        examples=(
            "Score these {n} {object} and explain {focus}.",
            "Write a {artefact} for {company}'s request for a {amount} facility.",
            "Stress-test {object} under a {pct} rate rise.",
            "Compare {focus} across {object} in {region}.",
            "Recommend a {artefact} for applicant {ref}.",
        ),
    ),
    D(
        "insurance-claims",
        "insurance claims handling",
        "finance",
        zones="finance public",
        scopes="claims:read claims:assess",
        methods="ASSESS VALIDATE ESCALATE REPORT",
        verbs="assess|adjudicate|estimate|process",
        qverbs="handle|settle|look into|price",
        objects="motor claims|property damage claims|travel insurance claims|"
        "health reimbursement claims|crop insurance claims|water damage photos",
        focus="coverage exclusions|repair cost estimates|fraud indicators|subrogation potential|"
        "missing documents|settlement amounts",
        artefacts="claim assessment|settlement offer|adjuster note|reserve estimate",
        tools="Guidewire ClaimCenter|Duck Creek|CCC Intelligent Solutions|Tractable",
        modalities="text|image|pdf",
        tags="insurance|claims|adjudication|insurtech",
        label="Claim|Assure|Policy|Cover|Adjust|Mutual",
        examples=(
            "Assess claim {ref} with {n} {object} and check {focus}.",
            "Estimate {focus} for {object} from the {region} storm.",
            "Draft a {artefact} for the motor claim filed on {date}.",
            "Find {object} in {period} with {focus}.",
            "Prepare an {artefact} for the water damage claim at {company}.",
        ),
    ),
    D(
        "medical-coding",
        "medical coding",
        "health",
        zones="health finance",
        scopes="clinical:read billing:code",
        methods="CLASSIFY VALIDATE REPORT",
        verbs="code|abstract|audit coding of|classify",
        qverbs="assign codes to|bill|label|tag",
        objects="discharge summaries|outpatient encounter notes|operative reports|"
        "emergency department visits|pathology reports",
        focus="ICD-10-CM codes|CPT procedure codes|DRG assignment|modifier usage|"
        "documentation gaps|denial risk",
        artefacts="coded claim|coding audit report|query to the physician|denial appeal letter",
        tools="3M 360 Encompass|Epic|Optum EncoderPro|SNOMED CT|HL7 FHIR",
        modalities="text|pdf",
        tags="medical-coding|icd-10|revenue-cycle|healthcare-billing",
        label="Code|Medi|Claim|Chart|Icd|Clinic",
        examples=(
            "Assign {focus} to these {n} {object}.",
            "Audit the coding of {object} from {period} for {focus}.",
            "Write a {artefact} for encounter {ref}.",
            "Find {focus} in the {object} before claims go out on {date}.",
            "Draft a {artefact} for the cardiology claim rejected by the payer.",
        ),
    ),
    D(
        "pharmacovigilance",
        "pharmacovigilance",
        "health",
        zones="health research eu",
        scopes="safety:read reports:classify",
        methods="ANALYZE CLASSIFY REPORT ESCALATE",
        verbs="triage|code|detect signals in|summarize",
        qverbs="review|monitor|keep an eye on|screen",
        objects="adverse event reports|case narratives|medical literature|"
        "social media mentions of drugs|periodic safety reports",
        focus="serious adverse events|MedDRA terms|duplicate cases|causality|"
        "disproportionality signals|reporting timelines",
        artefacts="ICSR draft|signal assessment|PSUR section|case triage list",
        tools="Argus Safety|MedDRA|EudraVigilance|FAERS|Veeva Vault Safety",
        modalities="text|pdf",
        tags="pharmacovigilance|drug-safety|adverse-events|regulatory",
        label="Pharma|Vigil|Safety|Dose|Signal|Remedy",
        examples=(
            "Triage these {n} {object} and flag {focus}.",
            "Code {object} to {focus} for product {ref}.",
            "Write a {artefact} for {focus} reported in {period}.",
            "Screen {object} for {focus} linked to the new anticoagulant.",
            "Check {object} from {region} against {focus} deadlines.",
        ),
    ),
    D(
        "patent-prior-art",
        "patent prior-art search",
        "legal",
        zones="legal research",
        scopes="patents:search documents:read",
        methods="QUERY ANALYZE REPORT",
        verbs="search prior art for|analyze|map|draft claims for",
        qverbs="look for prior art on|investigate|check novelty of|scout",
        objects="invention disclosures|patent applications|competitor patent portfolios|"
        "standard-essential patents|design patents",
        focus="novelty|freedom to operate|claim scope|citation networks|"
        "priority dates|invalidity arguments",
        artefacts="prior-art report|claim chart|landscape map|freedom-to-operate opinion draft",
        tools="Espacenet|Google Patents|PatSnap|Derwent Innovation|USPTO PatFT",
        modalities="text|pdf|image",
        tags="patents|prior-art|ip|intellectual-property",
        label="Patent|Claim|Inventa|Novel|Prior|Ip",
        examples=(
            "Search prior art for invention disclosure {ref} about battery cooling.",
            "Build a {artefact} comparing our claims with {company}'s patents.",
            "Assess {focus} for {object} filed before {date}.",
            "Map {object} in solid-state batteries and show {focus}.",
            "Draft a {artefact} for the {n} {object} we plan to license.",
        ),
    ),
    D(
        "privacy-compliance",
        "privacy and GDPR compliance",
        "legal",
        zones="legal eu internal",
        scopes="privacy:assess documents:read",
        methods="ASSESS VALIDATE REPORT",
        verbs="assess|map|audit|answer",
        qverbs="check|make compliant|review|handle",
        objects="data processing activities|privacy notices|cookie banners|"
        "data subject access requests|vendor DPAs|cross-border data transfers",
        focus="lawful basis|retention periods|special-category data|consent records|"
        "transfer impact|breach notification deadlines",
        artefacts="DPIA|record of processing activities|DSAR response pack|gap analysis",
        tools="OneTrust|TrustArc|BigID|Collibra|Osano",
        modalities="text",
        tags="privacy|gdpr|data-protection|compliance|dpia",
        label="Privacy|Consent|Gdpr|Data|Shield|Veil",
        examples=(
            "Run a {artefact} for the new {object} in the mobile app.",
            "Audit our {object} for {focus}.",
            "Answer DSAR {ref} within the 30-day deadline.",
            "Map {object} that involve {focus} across {n} systems.",
            "Check {object} to {country} for {focus}.",
        ),
    ),
    D(
        "ediscovery",
        "e-discovery",
        "legal",
        zones="legal",
        scopes="documents:read legal:review",
        methods="QUERY CLASSIFY REPORT",
        verbs="collect|review|tag|produce",
        qverbs="sift through|search|go through|pull",
        objects="email archives|Slack exports|custodian mailboxes|shared drives|"
        "deposition transcripts|board minutes",
        focus="privileged communications|responsiveness|key custodians|hot documents|"
        "date ranges|personal data redaction",
        artefacts="privilege log|production set|review batch|timeline of key events",
        tools="Relativity|Everlaw|Nuix|Exterro|Microsoft Purview",
        modalities="text|email|pdf",
        tags="ediscovery|litigation|document-review|legal",
        label="Discover|Docket|Evidence|Brief|Case|Matter",
        examples=(
            "Review {n} {object} for {focus} in matter {ref}.",
            "Build a {artefact} for the {object} of {company}.",
            "Find {focus} in {object} between {date} and {date2}.",
            "Tag {object} from {tool} for {focus}.",
            "Produce a {artefact} from the {object} collected in {period}.",
        ),
    ),
    D(
        "vulnerability-management",
        "vulnerability management",
        "security",
        zones="internal partner",
        scopes="security:scan assets:read",
        methods="SCAN ANALYZE REPORT",
        verbs="scan|prioritize|patch|track",
        qverbs="find holes in|fix|rank|chase",
        objects="container images|Kubernetes clusters|internet-facing hosts|"
        "third-party libraries|laptops|OT devices",
        focus="critical CVEs|exploitability|end-of-life software|misconfigurations|"
        "SBOM gaps|patch SLAs",
        artefacts="prioritized remediation list|software bill of materials|patch schedule|"
        "exposure dashboard",
        tools="Trivy|Nessus|Qualys|Snyk|Grype|Dependabot",
        modalities="text|code|tabular",
        tags="vulnerability-management|cve|patching|appsec",
        label="Vuln|Patch|Scan|Cve|Harden|Bastion",
        examples=(
            "Scan our {object} with {tool} and list {focus}.",
            "Prioritize {n} findings on {object} by {focus}.",
            "Generate an {artefact} for release {ref}.",
            "Check whether {object} are affected by CVE-2025-{n}.",
            "Build a {artefact} for {object} in the {region} data centre.",
        ),
    ),
    D(
        "cloud-cost-optimization",
        "cloud cost optimization",
        "tech",
        zones="internal partner",
        scopes="billing:read infra:analyze",
        methods="ANALYZE REPORT PROPOSE",
        verbs="analyze|right-size|forecast spend on|tag",
        qverbs="cut costs of|trim|shrink the bill for|audit spend on",
        objects="AWS accounts|Azure subscriptions|GCP projects|Kubernetes node pools|"
        "data warehouse queries|idle VMs",
        focus="reserved-instance coverage|idle resources|egress charges|"
        "untagged spend|storage tiering|commitment discounts",
        artefacts="savings plan|cost anomaly alert|chargeback report|right-sizing list",
        tools="AWS Cost Explorer|Kubecost|CloudHealth|Vantage|OpenCost",
        modalities="tabular|text",
        tags="finops|cloud-cost|optimization|aws|kubernetes",
        label="Cloud|Cost|Fin|Nimbus|Spend|Stratus",
        examples=(
            "Find {focus} in our {object} and estimate savings.",
            "Prepare a {artefact} for the {period} bill of {amount}.",
            "Right-size {object} that run below {pct} CPU.",
            "Explain why {object} cost rose {pct} in {period}.",
            "Tag {object} by team using {tool} data.",
        ),
    ),
    D(
        "ci-cd-pipelines",
        "CI/CD pipeline maintenance",
        "tech",
        zones="internal",
        scopes="ci:read ci:run",
        methods="ANALYZE REPAIR REPORT",
        verbs="fix|speed up|migrate|monitor",
        qverbs="unbreak|repair|accelerate|debug",
        objects="GitHub Actions workflows|Jenkins pipelines|flaky test suites|"
        "Docker builds|release pipelines|Helm deployments",
        focus="flaky tests|build cache misses|slow stages|secret leaks|failed deploys|"
        "dependency pinning",
        artefacts="fixed workflow file|pipeline speed report|migration plan|flaky-test list",
        tools="GitHub Actions|Jenkins|GitLab CI|Argo CD|Bazel|BuildKite",
        modalities="code|text|logs",
        tags="ci-cd|devops|build|release-engineering",
        label="Pipeline|Build|Deploy|Ship|Release|Forge",
        examples=(
            "Fix the failing {object} in repo {ref}.",
            "Find {focus} in our {object} and cut build time by {pct}.",
            "Migrate {object} from Jenkins to {tool}.",
            "Write a {artefact} for the {n} slowest {object}.",
            "Investigate {focus} in the nightly {object} since {date}.",
        ),
    ),
    D(
        "data-quality",
        "data pipeline quality",
        "tech",
        zones="internal research",
        scopes="data:read data:validate",
        methods="VALIDATE ANALYZE REPORT",
        verbs="validate|profile|monitor|deduplicate",
        qverbs="check|clean|sanity-check|watch",
        objects="ETL pipelines|customer master data|event streams|data lake tables|"
        "CRM records|dbt models",
        focus="schema drift|null spikes|duplicate records|late-arriving data|"
        "referential integrity breaks|freshness SLAs",
        artefacts="data quality report|validation suite|incident ticket|lineage map",
        tools="Great Expectations|dbt|Monte Carlo|Apache Airflow|Soda|Spark",
        modalities="tabular|text",
        tags="data-quality|data-engineering|etl|observability",
        label="Data|Quality|Stream|Lake|Pipe|Clean",
        examples=(
            "Validate {object} for {focus} every night.",
            "Profile the {object} loaded on {date} and write a {artefact}.",
            "Deduplicate {n} {object} imported from {company}.",
            "Find the cause of {focus} in {object} since {period}.",
            "Build a {artefact} for the {object} used by finance.",
        ),
    ),
    D(
        "bi-analytics",
        "business intelligence analytics",
        "tech",
        zones="internal finance retail",
        scopes="data:read reports:write",
        methods="QUERY ANALYZE REPORT",
        verbs="query|build dashboards for|explain|segment",
        qverbs="dig into|chart|slice|crunch",
        objects="sales data|web analytics|subscription revenue|marketing funnels|"
        "store performance|product usage events",
        focus="month-over-month growth|cohort retention|conversion drops|regional variance|"
        "top customers|seasonality",
        artefacts="dashboard|SQL query|executive summary|KPI scorecard",
        tools="SQL|Looker|Tableau|Power BI|Snowflake|BigQuery",
        modalities="tabular|text",
        tags="analytics|bi|dashboards|sql|reporting",
        label="Insight|Metric|Dash|Query|Chart|Lens",
        examples=(
            "Write a {artefact} showing {focus} in {object} for {period}.",
            "Explain the {pct} drop in {object} in {region}.",
            "Build a {artefact} of {object} in {tool}.",
            "Segment {object} by {focus} and list the top {n}.",
            "Compare {object} between {period} and the year before.",
        ),
    ),
    D(
        "ml-model-evaluation",
        "ML model evaluation",
        "research",
        zones="research internal",
        scopes="models:read models:evaluate",
        methods="ANALYZE EVALUATE REPORT",
        verbs="evaluate|benchmark|red-team|monitor",
        qverbs="test|measure|stress|audit",
        objects="LLM chatbots|image classifiers|recommendation models|fraud models|"
        "speech recognizers|retrieval pipelines",
        focus="bias across groups|hallucination rate|calibration|data drift|robustness|"
        "latency and cost",
        artefacts="evaluation report|model card|benchmark table|red-team findings",
        tools="MLflow|Weights & Biases|lm-eval-harness|Evidently|PyTorch|Ragas",
        modalities="text|tabular|image",
        tags="ml-evaluation|model-monitoring|ai-safety|mlops",
        label="Model|Eval|Bench|Neural|Tensor|Probe",
        examples=(
            "Evaluate our {object} for {focus} on the {n}-example test set.",
            "Write a {artefact} for model version {ref}.",
            "Compare {object} trained in {period} on {focus}.",
            "Red-team the {object} and report {focus}.",
            "Track {focus} of production {object} with {tool}.",
        ),
    ),
    D(
        "literature-review",
        "scientific literature review",
        "research",
        zones="research education health",
        scopes="literature:search documents:read",
        methods="QUERY SUMMARIZE REPORT",
        verbs="search|summarize|synthesize|extract data from",
        qverbs="read up on|survey|condense|pull evidence from",
        objects="peer-reviewed papers|preprints|systematic reviews|conference proceedings|"
        "clinical guidelines|grant reports",
        focus="effect sizes|study design quality|conflicting findings|research gaps|"
        "citation trends|methodology",
        artefacts="annotated bibliography|evidence table|review draft|PRISMA flow diagram",
        tools="PubMed|Semantic Scholar|Zotero|arXiv|Scopus|Covidence",
        modalities="text|pdf",
        tags="literature-review|research|science|summarization",
        label="Scholar|Paper|Cite|Review|Biblio|Sage",
        examples=(
            "Summarize {object} on microplastics published since {year} with {focus}.",
            "Build an {artefact} of {n} {object} about CRISPR delivery.",
            "Extract {focus} from these {object} into an {artefact}.",
            "Find {focus} in {object} on remote work and productivity.",
            "Screen {n} abstracts from {tool} for a review of {focus}.",
        ),
    ),
    D(
        "candidate-screening",
        "recruiting and candidate screening",
        "people",
        zones="internal partner",
        scopes="candidates:read interviews:schedule",
        methods="SCREEN SCHEDULE QUERY REPORT",
        verbs="screen|source|shortlist|schedule interviews with",
        qverbs="find|hire|vet|line up",
        objects="software engineering applicants|nurse candidates|sales hires|"
        "graduate applicants|executive candidates|warehouse staff",
        focus="required skills|years of experience|work authorization|salary expectations|"
        "diversity of the slate|notice periods",
        artefacts="ranked shortlist|interview schedule|candidate summary|outreach email",
        tools="Greenhouse|Lever|LinkedIn Recruiter|Workday Recruiting|Calendly",
        modalities="text|pdf",
        tags="recruiting|hiring|talent-acquisition|screening",
        label="Talent|Hire|Recruit|Scout|Career|Match",
        examples=(
            "Screen {n} {object} for {focus} and return a {artefact}.",
            "Source {object} in {city} for requisition {ref}.",
            "Schedule interviews with the top {object} in {tool}.",
            "Write an {artefact} to passive {object}.",
            "Compare {object} on {focus} for the {region} team.",
        ),
    ),
    D(
        "payroll",
        "payroll processing",
        "people",
        zones="finance internal",
        scopes="payroll:read payroll:run",
        methods="CALCULATE VALIDATE REPORT",
        verbs="run|calculate|validate|reconcile",
        qverbs="pay|process|sort out|check",
        objects="monthly payroll|overtime hours|contractor payments|bonus payouts|"
        "pension contributions|multi-country payroll",
        focus="tax withholding|statutory deductions|retroactive pay changes|"
        "leave balances|payslip errors|minimum wage rules",
        artefacts="payroll register|payslip batch|variance report|bank payment file",
        tools="ADP|Deel|Gusto|SAP SuccessFactors|Payfit",
        modalities="tabular|text",
        tags="payroll|hr|compensation|compliance",
        label="Payroll|Wage|Salary|Pay|Comp|Paycheck",
        examples=(
            "Run {object} for {n} employees in {country}.",
            "Check {object} for {focus} before {date}.",
            "Produce a {artefact} comparing {period} to the previous month.",
            "Calculate {focus} for employee {ref}.",
            "Reconcile {object} exported from {tool} with the ledger.",
        ),
    ),
    D(
        "marketing-copywriting",
        "marketing copywriting",
        "media",
        zones="public retail partner",
        scopes="content:write brand:read",
        methods="WRITE PROPOSE SUMMARIZE",
        verbs="write|rewrite|split-test|adapt",
        qverbs="draft|come up with|punch up|create",
        objects="landing pages|email campaigns|product descriptions|ad headlines|"
        "press releases|LinkedIn posts",
        focus="brand voice|call to action|SEO keywords|reading level|"
        "character limits|audience persona",
        artefacts="copy variant set|campaign brief|tagline shortlist|content calendar",
        tools="HubSpot|Mailchimp|Google Ads|Figma|Notion",
        modalities="text|image",
        tags="copywriting|marketing|content|advertising|brand",
        label="Copy|Brand|Pitch|Story|Word|Spark",
        examples=(
            "Write {n} {object} for the {product} launch with a strong {focus}.",
            "Rewrite our {object} for {region} in our {focus}.",
            "Create a {artefact} for the {period} campaign.",
            "Split-test {object} for {tool} around {focus}.",
            "Build a {artefact} for {company}'s spring sale.",
        ),
    ),
    D(
        "content-moderation",
        "content moderation",
        "media",
        zones="public partner",
        scopes="content:read content:moderate",
        methods="CLASSIFY ESCALATE REPORT",
        verbs="moderate|classify|remove|review appeals about",
        qverbs="police|filter|screen|clean up",
        objects="user comments|forum posts|marketplace listings|profile photos|"
        "livestream chats|product reviews",
        focus="hate speech|spam|self-harm content|counterfeit goods|harassment|misinformation",
        artefacts="moderation decision|policy violation report|appeal response|transparency report",
        tools="Perspective API|Hive Moderation|OpenAI moderation|Two Hat|ActiveFence",
        modalities="text|image|video",
        tags="content-moderation|trust-and-safety|policy",
        label="Moderate|Safe|Filter|Guard|Clean|Civic",
        examples=(
            "Screen {n} {object} for {focus} in {lang}.",
            "Write an {artefact} for the takedown of listing {ref}.",
            "Classify {object} flagged in {period} by {focus}.",
            "Prepare the {period} {artefact}.",
            "Review appeals about {object} removed for {focus}.",
        ),
    ),
    D(
        "seo-content-audit",
        "SEO content audit",
        "media",
        zones="public retail",
        scopes="web:crawl content:analyze",
        methods="ANALYZE REPORT PROPOSE",
        verbs="audit|optimize|crawl|cluster keywords for",
        qverbs="rank|improve search traffic for|tune|review",
        objects="blog articles|category pages|product pages|help-centre pages|international sites",
        focus="keyword cannibalization|broken links|page speed|meta descriptions|"
        "hreflang tags|thin content",
        artefacts="SEO audit|keyword map|content brief|redirect plan",
        tools="Ahrefs|Semrush|Screaming Frog|Google Search Console|Lighthouse",
        modalities="text|html",
        tags="seo|content-marketing|web|search-ranking",
        label="Seo|Rank|Search|Crawl|Serp|Keyword",
        examples=(
            "Audit {n} {object} for {focus}.",
            "Build a {artefact} for our {object} in {lang}.",
            "Crawl the site with {tool} and list {focus}.",
            "Write a {artefact} for a page about {product}.",
            "Explain the {pct} traffic drop on {object} since {date}.",
        ),
    ),
    D(
        "catalog-enrichment",
        "e-commerce catalog enrichment",
        "retail",
        zones="retail partner",
        scopes="catalog:read catalog:write",
        methods="EXTRACT CLASSIFY WRITE",
        verbs="enrich|categorize|normalize|write attributes for",
        qverbs="tidy up|fill in|tag|complete",
        objects="product listings|supplier feeds|fashion catalogues|grocery items|"
        "spare-parts catalogues|marketplace offers",
        focus="missing attributes|category taxonomy|size charts|image quality|"
        "duplicate SKUs|GTIN validation",
        artefacts="enriched feed|taxonomy mapping|attribute completeness report|"
        "product description",
        tools="Akeneo|Salsify|Shopify|Google Merchant Center|Amazon Seller Central",
        modalities="text|image|tabular",
        tags="ecommerce|catalog|pim|product-data|retail",
        label="Catalog|Product|Shelf|Sku|Merch|Store",
        examples=(
            "Enrich {n} {object} with {focus}.",
            "Map {object} from {company} to our {focus}.",
            "Find {focus} in the {object} before uploading to {tool}.",
            "Write a {artefact} for {product} in {lang}.",
            "Produce an {artefact} for the {object} added in {period}.",
        ),
    ),
    D(
        "dynamic-pricing",
        "dynamic pricing",
        "retail",
        zones="retail public",
        scopes="prices:read prices:propose",
        methods="ANALYZE PROPOSE REPORT",
        verbs="price|reprice|monitor competitor prices for|optimize markdowns on",
        qverbs="set prices for|undercut|track prices of|discount",
        objects="consumer electronics|hotel rooms|airline seats|grocery staples|"
        "fashion clearance stock|event tickets",
        focus="price elasticity|competitor price moves|margin floors|inventory age|"
        "demand peaks|MAP policies",
        artefacts="price recommendation|markdown schedule|competitor price report|elasticity model",
        tools="Competera|Revionics|PriceLabs|Python|Prisync",
        modalities="tabular|text",
        tags="pricing|revenue-management|retail|ecommerce",
        label="Price|Margin|Yield|Tag|Revenue|Markdown",
        examples=(
            "Reprice {n} {object} considering {focus}.",
            "Build a {artefact} for {object} in {period}.",
            "Watch {focus} for {object} across {n} competitors.",
            "Estimate {focus} for {object} in {region}.",
            "Recommend a {artefact} for {object} older than {n} days.",
        ),
    ),
    D(
        "route-planning",
        "logistics route planning",
        "ops",
        zones="industrial public retail",
        scopes="fleet:read routes:plan",
        methods="PLAN OPTIMIZE SCHEDULE",
        verbs="plan|optimize|dispatch|re-route",
        qverbs="schedule|map out|sequence|work out",
        objects="last-mile deliveries|truck fleets|field technician visits|"
        "refrigerated shipments|school bus routes|courier pickups",
        focus="delivery time windows|driver hours rules|fuel cost|vehicle capacity|"
        "traffic disruptions|emissions",
        artefacts="optimized route plan|dispatch schedule|ETA feed|fleet utilization report",
        tools="OR-Tools|HERE Routing|Samsara|OSRM|Routific",
        modalities="geo|tabular|text",
        tags="logistics|routing|fleet|last-mile|dispatch",
        label="Route|Fleet|Dispatch|Haul|Courier|Transit",
        examples=(
            "Plan {object} for {n} vehicles in {city} respecting {focus}.",
            "Re-route {object} around {focus} on {date}.",
            "Build a {artefact} for depot {ref}.",
            "Cut {focus} for {object} in {region} by {pct}.",
            "Dispatch {object} using {tool} and send an {artefact}.",
        ),
    ),
    D(
        "warehouse-inventory",
        "warehouse inventory management",
        "ops",
        zones="industrial retail",
        scopes="inventory:read inventory:adjust",
        methods="COUNT RECONCILE REPORT",
        verbs="count|slot|reconcile|replenish",
        qverbs="track|sort out|audit|restock",
        objects="pallet locations|pick faces|cycle counts|returned goods|"
        "cold-storage stock|bin inventories",
        focus="shrinkage|slotting efficiency|stock discrepancies|expiry dates|"
        "pick path length|reorder points",
        artefacts="cycle count plan|slotting proposal|discrepancy report|replenishment order",
        tools="Manhattan WMS|SAP EWM|RFID readers|Blue Yonder WMS|Excel",
        modalities="tabular|image|text",
        tags="warehouse|inventory|wms|fulfilment",
        label="Stock|Bin|Depot|Pallet|Store|Crate",
        examples=(
            "Reconcile {object} in warehouse {ref} and explain {focus}.",
            "Propose a {artefact} to reduce {focus}.",
            "Schedule {object} for {n} aisles next week.",
            "Find {focus} in {object} recorded in {tool}.",
            "Raise a {artefact} for items below {focus}.",
        ),
    ),
    D(
        "predictive-maintenance",
        "predictive maintenance",
        "industrial",
        zones="industrial partner",
        scopes="sensors:read maintenance:plan",
        methods="ANALYZE FORECAST ESCALATE",
        verbs="predict failures of|monitor|diagnose|schedule maintenance for",
        qverbs="keep running|foresee breakdowns in|watch|service",
        objects="wind turbines|CNC machines|conveyor belts|pumps and compressors|"
        "railway switches|HVAC units",
        focus="vibration anomalies|bearing wear|temperature drift|remaining useful life|"
        "oil contamination|unplanned downtime",
        artefacts="maintenance work order|failure risk ranking|root-cause analysis|"
        "sensor health dashboard",
        tools="OSIsoft PI|AWS IoT SiteWise|IBM Maximo|MATLAB|InfluxDB",
        modalities="time-series|tabular|text",
        tags="predictive-maintenance|iot|industrial|condition-monitoring",
        label="Turbine|Sensor|Machine|Gear|Motor|Forge",
        examples=(
            "Detect {focus} in {object} at plant {ref}.",
            "Estimate {focus} for the {n} {object} in {region}.",
            "Create a {artefact} for {object} showing {focus}.",
            "Analyse {tool} data from {object} since {date}.",
            "Write a {artefact} for the compressor failure in {period}.",
        ),
    ),
    D(
        "energy-management",
        "building energy management",
        "industrial",
        zones="industrial public",
        scopes="meters:read controls:adjust",
        methods="ANALYZE OPTIMIZE REPORT",
        verbs="optimize|benchmark|forecast|report on",
        qverbs="lower|cut|track|save on",
        objects="office buildings|heat pumps|solar arrays|EV charging sites|"
        "data-centre cooling|smart meters",
        focus="peak demand charges|carbon emissions|occupancy schedules|tariff windows|"
        "energy waste|battery dispatch",
        artefacts="energy savings plan|ESG emissions report|load forecast|control schedule",
        tools="BACnet|EnergyPlus|Schneider EcoStruxure|Home Assistant|Grafana",
        modalities="time-series|tabular|text",
        tags="energy|sustainability|esg|smart-building",
        label="Energy|Watt|Grid|Solar|Volt|Green",
        examples=(
            "Reduce {focus} across {n} {object}.",
            "Write the {period} {artefact} for our {object}.",
            "Forecast load for {object} in {city} next week.",
            "Move {object} into cheaper tariff windows to cut {focus}.",
            "Find {focus} in {object} using {tool} data.",
        ),
    ),
    D(
        "lease-abstraction",
        "real-estate lease abstraction",
        "legal",
        zones="legal finance",
        scopes="documents:read leases:abstract",
        methods="EXTRACT SUMMARIZE REPORT",
        verbs="abstract|extract key dates from|summarize|compare",
        qverbs="pull terms from|digest|condense|read",
        objects="commercial leases|retail leases|ground leases|lease amendments|"
        "sublease agreements",
        focus="rent escalations|break options|renewal notice dates|service charges|"
        "repair obligations|IFRS 16 inputs",
        artefacts="lease abstract|critical dates calendar|rent roll|portfolio summary",
        tools="Yardi|MRI Software|Visual Lease|Excel",
        modalities="text|pdf",
        tags="real-estate|leases|property|abstraction",
        label="Lease|Estate|Property|Tenant|Deed|Realty",
        examples=(
            "Abstract {n} {object} and capture {focus}.",
            "Build a {artefact} for the {city} portfolio.",
            "Compare {focus} across {object} signed with {company}.",
            "Extract {focus} from lease {ref}.",
            "Prepare a {artefact} for {object} expiring before {date}.",
        ),
    ),
    D(
        "public-procurement",
        "public procurement and tenders",
        "public",
        zones="government public eu",
        scopes="tenders:read bids:write",
        methods="QUERY WRITE VALIDATE",
        verbs="find|qualify|write bids for|check compliance of",
        qverbs="bid on|respond to|track|hunt for",
        objects="public tenders|framework agreements|RFPs|grant calls|"
        "municipal contracts|defence procurements",
        focus="eligibility criteria|submission deadlines|evaluation weighting|"
        "mandatory certifications|pricing schedules|social value requirements",
        artefacts="bid response|go/no-go assessment|compliance matrix|tender alert",
        tools="TED Europa|SAM.gov|Contracts Finder|Loopio|RFPIO",
        modalities="text|pdf",
        tags="procurement|tenders|rfp|public-sector|bids",
        label="Tender|Bid|Grant|Civic|Proposal|Quorum",
        examples=(
            "Find {object} in {region} matching our {focus}.",
            "Write a {artefact} for tender {ref} due {date}.",
            "Build a {artefact} for the {object} on {tool}.",
            "Check our draft against the {focus} of the {object}.",
            "Summarize {n} {object} published in {period}.",
        ),
    ),
    D(
        "citizen-services",
        "citizen services and permits",
        "public",
        zones="government public",
        scopes="applications:read cases:route",
        methods="QUERY CLASSIFY NOTIFY CONFIRM",
        verbs="process|answer questions about|check completeness of|route",
        qverbs="help with|handle|sort|deal with",
        objects="building permit applications|benefit claims|parking appeals|"
        "business licence renewals|residency registrations|FOI requests",
        focus="missing documents|eligibility rules|statutory deadlines|fee calculations|"
        "accessibility needs|language support",
        artefacts="completeness check|decision letter draft|case routing|FAQ answer",
        tools="Salesforce Public Sector|ServiceNow|GOV.UK Notify|Microsoft Dynamics",
        modalities="text|pdf|voice",
        tags="govtech|citizen-services|permits|public-sector",
        label="Civic|Permit|Citizen|Town|Council|Agora",
        examples=(
            "Check {object} from {date} for {focus}.",
            "Draft a {artefact} for application {ref}.",
            "Answer residents' questions about {focus} in {lang}.",
            "Route {n} {object} to the right department.",
            "Build a {artefact} for {object} in {city}.",
        ),
    ),
    D(
        "tutoring",
        "tutoring and curriculum design",
        "education",
        zones="education public",
        scopes="learning:read learning:assist",
        methods="LEARN PROPOSE QUERY",
        verbs="tutor|design lessons on|grade|explain",
        qverbs="teach|help students with|coach|walk through",
        objects="high-school algebra|introductory statistics|essay writing|"
        "Python programming|chemistry lab reports|language learners",
        focus="misconceptions|learning objectives|rubric alignment|exam preparation|"
        "differentiated instruction|feedback quality",
        artefacts="lesson plan|practice quiz|graded rubric|study guide",
        tools="Moodle|Canvas|Khan Academy|Google Classroom|Jupyter",
        modalities="text|image",
        tags="education|tutoring|curriculum|edtech|assessment",
        label="Tutor|Learn|Mentor|Lesson|Quiz|Sage",
        examples=(
            "Tutor a student on {object} and address {focus}.",
            "Design a {artefact} on {object} for week {n}.",
            "Grade {n} submissions on {object} with a {artefact}.",
            "Create a {artefact} for {object} before the {date} exam.",
            "Explain {object} to a student in {lang}.",
        ),
    ),
    D(
        "meeting-assistant",
        "meeting scheduling and notes",
        "ops",
        zones="internal partner",
        scopes="calendar:read calendar:write",
        methods="SCHEDULE SUMMARIZE NOTIFY",
        verbs="schedule|summarize|take notes in|follow up on",
        qverbs="book|recap|minute|organise",
        objects="board meetings|customer calls|sprint reviews|all-hands meetings|"
        "interview panels|cross-time-zone standups",
        focus="action items|decisions|attendee availability|time-zone overlap|"
        "agenda topics|open questions",
        artefacts="minutes document|calendar invite|follow-up email|decision log",
        tools="Google Calendar|Microsoft Teams|Zoom|Outlook|Otter.ai",
        modalities="text|audio",
        tags="meetings|scheduling|productivity|note-taking",
        label="Meet|Agenda|Minute|Calendar|Huddle|Sync",
        examples=(
            "Schedule {object} for {n} people across {focus}.",
            "Write a {artefact} for the {date} {object}.",
            "List {focus} from yesterday's {object}.",
            "Send a {artefact} after the call with {company}.",
            "Find a slot for {object} in {tool} next week.",
        ),
    ),
    D(
        "accessibility-audit",
        "accessibility audit",
        "tech",
        zones="public government education",
        scopes="web:crawl content:analyze",
        methods="ANALYZE VALIDATE REPORT",
        verbs="audit|test|fix|remediate",
        qverbs="check|make accessible|evaluate|review",
        objects="web forms|mobile apps|PDF documents|e-learning modules|checkout flows|"
        "government portals",
        focus="WCAG 2.2 AA conformance|screen-reader labels|colour contrast|"
        "keyboard navigation|alt text|focus order",
        artefacts="accessibility report|VPAT|remediation backlog|conformance statement",
        tools="axe-core|Lighthouse|NVDA|VoiceOver|WAVE|Pa11y",
        modalities="text|html|image",
        tags="accessibility|wcag|a11y|ux|compliance",
        label="Access|Inclusive|Wcag|Clear|Able|Beacon",
        examples=(
            "Audit our {object} for {focus}.",
            "Write a {artefact} for release {ref}.",
            "Test {object} with {tool} and list {focus} issues.",
            "Fix {focus} problems in {n} {object}.",
            "Produce a {artefact} for the {object} before {date}.",
        ),
    ),
    D(
        "vendor-risk",
        "vendor risk assessment",
        "ops",
        zones="internal finance partner",
        scopes="vendors:read risk:assess",
        methods="ASSESS REPORT QUERY",
        verbs="assess|monitor|tier|review questionnaires from",
        qverbs="vet|rate|check up on|evaluate",
        objects="SaaS vendors|logistics suppliers|cloud providers|offshore contractors|"
        "critical third parties|payment processors",
        focus="SOC 2 reports|financial stability|data residency|concentration risk|"
        "business continuity|ESG ratings",
        artefacts="vendor risk rating|due-diligence questionnaire review|"
        "third-party risk register|remediation plan",
        tools="OneTrust Vendorpedia|SecurityScorecard|BitSight|Archer|Prevalent",
        modalities="text|pdf|tabular",
        tags="vendor-risk|third-party-risk|procurement|grc",
        label="Vendor|Supplier|Partner|Risk|Assure|Vet",
        examples=(
            "Assess {object} for {focus} before contract {ref}.",
            "Review the {artefact} from {company}.",
            "Tier {n} {object} by {focus}.",
            "Monitor {object} for changes in {focus} since {period}.",
            "Update the {artefact} for {object} in {region}.",
        ),
    ),
    D(
        "call-analytics",
        "call transcription and analytics",
        "customer",
        zones="public retail finance",
        scopes="calls:read transcripts:analyze",
        methods="TRANSCRIBE ANALYZE SUMMARIZE",
        verbs="transcribe|analyze|score|summarize",
        qverbs="listen to|review|grade|write up",
        objects="sales calls|contact-centre recordings|voicemails|collections calls|"
        "telehealth consultations|earnings calls",
        focus="compliance phrases|customer sentiment|talk-to-listen ratio|objections|"
        "script adherence|silence and hold time",
        artefacts="call transcript|QA scorecard|coaching plan|call summary",
        tools="Whisper|Gong|Amazon Transcribe|CallMiner|Genesys",
        modalities="audio|text|voice",
        tags="speech-analytics|transcription|call-center|qa",
        label="Voice|Call|Echo|Speech|Tone|Audio",
        examples=(
            "Transcribe {n} {object} in {lang} and check {focus}.",
            "Build a {artefact} for agent {ref}.",
            "Summarize {object} from {period} by {focus}.",
            "Write a {artefact} for reps with low {focus}.",
            "Flag {object} from {tool} missing {focus}.",
        ),
    ),
    D(
        "esg-reporting",
        "ESG and sustainability reporting",
        "finance",
        zones="finance eu public",
        scopes="esg:read reports:write",
        methods="ANALYZE REPORT VALIDATE",
        verbs="measure|disclose|collect data for|verify",
        qverbs="report|calculate|account for|audit",
        objects="scope 3 emissions|supplier sustainability data|CSRD disclosures|"
        "water usage|diversity metrics|green bond allocations",
        focus="double materiality|emission factors|data gaps|taxonomy alignment|"
        "assurance readiness|year-on-year change",
        artefacts="sustainability report section|emissions inventory|materiality matrix|"
        "data request template",
        tools="Watershed|Persefoni|Workiva|GHG Protocol|Sphera",
        modalities="tabular|text|pdf",
        tags="esg|sustainability|csrd|carbon-accounting",
        label="Green|Carbon|Esg|Terra|Impact|Leaf",
        examples=(
            "Calculate {object} for {period} using {focus}.",
            "Draft the {artefact} on {object}.",
            "Find {focus} in {object} from {n} suppliers.",
            "Check our {object} for {focus} before the auditor visit on {date}.",
            "Build an {artefact} for {company} in {tool}.",
        ),
    ),
    D(
        "legal-research",
        "case-law research",
        "legal",
        zones="legal research",
        scopes="legal:research documents:read",
        methods="QUERY SUMMARIZE REPORT",
        verbs="research|summarize|find precedents on|cite-check",
        qverbs="look up|brief me on|dig up|verify citations in",
        objects="employment disputes|appellate decisions|regulatory enforcement actions|"
        "statutes|competition cases|tenancy disputes",
        focus="binding precedent|jurisdictional differences|recent rulings|"
        "damages awarded|limitation periods|good law status",
        artefacts="research memo|case brief|citation table|jurisdiction survey",
        tools="Westlaw|LexisNexis|CourtListener|vLex|EUR-Lex",
        modalities="text|pdf",
        tags="legal-research|case-law|litigation|precedent",
        label="Lex|Jurist|Case|Precedent|Statute|Brief",
        examples=(
            "Research {focus} on {object} in {country}.",
            "Write a {artefact} on {object} decided since {year}.",
            "Cite-check the {n} authorities in brief {ref}.",
            "Compare {focus} for {object} across {n} jurisdictions.",
            "Find {object} with {focus} using {tool}.",
        ),
    ),
    D(
        "document-ocr",
        "document capture and OCR",
        "ops",
        zones="internal public finance",
        scopes="documents:read documents:extract",
        methods="EXTRACT CLASSIFY VALIDATE",
        verbs="digitize|extract fields from|classify|redact",
        qverbs="scan|read|pull data out of|anonymize",
        objects="handwritten forms|shipping manifests|ID documents|bank statements|"
        "insurance forms|archived paper records",
        focus="field accuracy|handwriting|table extraction|personal data|"
        "document type|low-quality scans",
        artefacts="structured JSON output|redacted PDF|extraction accuracy report|"
        "classified document batch",
        tools="Tesseract|AWS Textract|Azure Document Intelligence|ABBYY FineReader|docTR",
        modalities="image|pdf|text",
        tags="ocr|document-ai|extraction|idp|redaction",
        label="Scan|Docu|Page|Form|Text|Capture",
        examples=(
            "Extract data from {n} {object} into {artefact}.",
            "Redact {focus} from {object} before sharing with {company}.",
            "Classify the {object} received on {date} by {focus}.",
            "Improve {focus} on {object} processed with {tool}.",
            "Digitize {object} from the {city} archive.",
        ),
    ),
    D(
        "threat-intelligence",
        "threat intelligence",
        "security",
        zones="partner government internal",
        scopes="threat:read intel:share",
        methods="ANALYZE REPORT NOTIFY",
        verbs="track|enrich|attribute|brief on",
        qverbs="follow|research|profile|monitor",
        objects="ransomware groups|phishing kits|dark-web forums|malware samples|"
        "botnet infrastructure|leaked credentials",
        focus="TTPs mapped to MITRE ATT&CK|indicators of compromise|targeted sectors|"
        "attribution confidence|new exploits|infrastructure overlaps",
        artefacts="threat brief|STIX bundle|actor profile|weekly intel digest",
        tools="MISP|OpenCTI|VirusTotal|Recorded Future|Shodan",
        modalities="text|code",
        tags="threat-intelligence|cti|security|malware",
        label="Intel|Threat|Recon|Hawk|Cipher|Specter",
        examples=(
            "Profile the {object} targeting {region} and list {focus}.",
            "Enrich {n} hashes from {object} with {tool}.",
            "Write a {artefact} on {object} seen in {period}.",
            "Check whether {object} show {focus} against our sector.",
            "Export {focus} for campaign {ref} as a {artefact}.",
        ),
    ),
    D(
        "telehealth-intake",
        "telehealth patient intake",
        "health",
        zones="health public",
        scopes="patients:read appointments:schedule",
        methods="QUERY SCHEDULE ESCALATE",
        verbs="interview|schedule|pre-screen|summarize symptoms of",
        qverbs="check in|book|triage|talk to",
        objects="new patients|follow-up patients|mental-health clients|"
        "paediatric callers|chronic-care patients",
        focus="red-flag symptoms|insurance eligibility|medication history|"
        "appointment urgency|consent forms|interpreter needs",
        artefacts="intake summary|appointment booking|nurse escalation|pre-visit questionnaire",
        tools="Epic MyChart|Doxy.me|Twilio|Athenahealth|FHIR",
        modalities="text|voice",
        tags="telehealth|patient-intake|scheduling|healthcare",
        label="Care|Clinic|Health|Nurse|Vital|Pulse",
        examples=(
            "Pre-screen {object} for {focus} before their video visit.",
            "Write an {artefact} for patient {ref}.",
            "Book {object} in {city} with {focus} in mind.",
            "Collect {focus} from {n} {object} in {lang}.",
            "Send a {artefact} to {object} booked on {date}.",
        ),
    ),
    D(
        "grant-writing",
        "grant writing",
        "research",
        zones="research education public",
        scopes="documents:write grants:read",
        methods="WRITE PROPOSE VALIDATE",
        verbs="draft|edit|budget|check eligibility for",
        qverbs="write|polish|put together|prepare",
        objects="research grant proposals|foundation applications|Horizon Europe bids|"
        "NIH R01 applications|arts council applications",
        focus="specific aims|budget justification|impact statements|page limits|"
        "reviewer criteria|data management plans",
        artefacts="proposal draft|budget table|letter of support|compliance checklist",
        tools="Grants.gov|Overleaf|Funding & Tenders Portal|Word|Zotero",
        modalities="text|pdf",
        tags="grants|research-funding|proposal-writing|nonprofit",
        label="Grant|Fund|Proposal|Scholar|Endow|Quill",
        examples=(
            "Draft the {focus} for our {object} due {date}.",
            "Check the {object} against the {focus}.",
            "Prepare a {artefact} for a {amount} request.",
            "Edit {n} pages of {object} to meet {focus}.",
            "Write a {artefact} for call {ref}.",
        ),
    ),
)

# Global slot values for example and query templates.
SLOTS: dict[str, tuple[str, ...]] = {
    "period": _split(
        "Q1 2026|Q2 2026|Q3 2025|Q4 2025|FY2025|March 2026|January|H1 2026|October 2025|2025"
    ),
    "region": _split(
        "EMEA|the Nordics|Southeast Asia|Latin America|the US Midwest|Germany|Japan|"
        "West Africa|the Benelux|Ontario|Australia and New Zealand|the Gulf states"
    ),
    "lang": _split(
        "German|Japanese|Brazilian Portuguese|Spanish|Korean|French|Arabic|Polish|Hindi|"
        "Turkish|Dutch|Vietnamese|Italian|Swahili"
    ),
    "country": _split(
        "German|French|UK|US|Dutch|Singapore|Brazilian|Indian|Canadian|Spanish|Irish|Swiss"
    ),
    "city": _split(
        "Berlin|Lisbon|Singapore|Chicago|Toronto|Nairobi|Osaka|Madrid|Austin|Warsaw|"
        "Melbourne|Dublin|Seoul|Lyon|Denver|Bogotá"
    ),
    "product": _split(
        "smart thermostat|running shoe|budgeting app|electric bike|plant-based yoghurt|"
        "noise-cancelling headphones|project management tool|home espresso machine"
    ),
    "amount": _split("EUR 250k|$1.2M|GBP 40k|$75k|EUR 3M|$500k|CHF 2M"),
    "pct": _split("5%|8%|12%|15%|20%|30%|3%"),
    "year": _split("2019|2020|2021|2022|2023|2024"),
}

# Org names: prefix x sector word; the sector word ties an org to a domain group.
ORG_PREFIXES: tuple[str, ...] = _split(
    "acme|northwind|bluepeak|ironbridge|silverline|redwood|brightpath|clearwater|"
    "stonegate|highland|cobalt|evergreen|fairhaven|granite|harbor|juniper|keystone|"
    "lakeside|meridian|nimbus|oakridge|pinecrest|quantum|riverbend|summit|tidewater|"
    "urbane|vantage|westfield|zenith|amber|beacon|cedar|delta|ember|falcon|"
    "glacier|helios|indigo|jasper|kestrel|lumen|maple|nova|orion|polaris|"
    "quartz|raven|sierra|tundra|umbra|vertex|willow|xenon|yarrow|zephyr|"
    "atlas|boreal|cirrus|dune|echo|fjord|gale|halcyon|isle|jade|koru|larch|"
    "mosaic|north|opal|prism|quill|rune|saffron|topaz"
)
SECTOR_WORDS: dict[str, tuple[str, ...]] = {
    "finance": _split("capital|ledger|payments|fintech|assurance|markets|credit|treasury"),
    "health": _split("health|medical|care|clinic|bio|pharma|diagnostics"),
    "legal": _split("legal|law|counsel|compliance|ip"),
    "tech": _split("labs|systems|software|cloud|data|dev|analytics"),
    "security": _split("security|cyber|secure|defense"),
    "ops": _split("logistics|ops|supply|freight|works"),
    "people": _split("talent|people|hr|staffing"),
    "customer": _split("support|cx|service|contact"),
    "media": _split("media|content|studio|words|language"),
    "travel": _split("travel|trips|voyages|mobility"),
    "research": _split("research|science|institute|ai"),
    "retail": _split("retail|commerce|shop|brands"),
    "industrial": _split("industries|energy|machines|grid|manufacturing"),
    "public": _split("civic|gov|public|municipal"),
    "education": _split("learning|academy|edu|school"),
}
ORG_TLDS: tuple[str, ...] = ("example", "example", "example.com", "example.org", "example.net")
ORG_FORMS: tuple[str, ...] = _split("Ltd|Inc.|GmbH|LLC|B.V.|S.A.|AB|Oy|Pty Ltd|SAS|plc")

LABEL_SUFFIXES: tuple[str, ...] = _split(
    "pro|bot|desk|works|ai|assist|hub|pilot|scout|sentinel|forge|mate|flow|iq|ops|agent|"
    "lens|engine|expert|core"
)

# Sentence templates for the job description. {Verb} = third-person form.
LEAD_SENTENCES: tuple[str, ...] = (
    "{Verbs} {object} and {object2}, with a focus on {focus} and {focus2}.",
    "{Verbs} {object} for {focus}, then delivers a {artefact}.",
    "Specialised agent that {verbs} {object}; it checks {focus} and {focus2}.",
    "{Verbs} and {verbs2} {object} with attention to {focus}.",
    "Helps teams {verb} {object}, covering {focus}, {focus2} and {focus3}.",
    "{Name} agent: {verbs} {object} and {object2} against {focus}.",
)
TOOL_SENTENCES: tuple[str, ...] = (
    "Works with {tool} and {tool2} and returns a {artefact}.",
    "Uses {tool} to produce a {artefact} and a {artefact2}.",
    "Integrates with {tool}; output is a {artefact}.",
    "Delivers a {artefact} built from {tool} data.",
)
SECOND_DOMAIN_SENTENCES: tuple[str, ...] = (
    "Also {verbs} {object} for {focus}.",
    "It can additionally {verb} {object}, watching for {focus}.",
    "Secondary skill: {name} - {verbs} {object}.",
)

# Query templates: paraphrase (query verbs, other wording), never agent text.
QUERY_TEMPLATES: tuple[str, ...] = (
    "{qverb} {object} for {focus}",
    "I need someone to {qverb} our {object} - mainly worried about {focus}",
    "looking for an agent that can {qverb} {object} and hand back a {artefact}",
    "who can {qverb} {object} before {date}?",
    "{focus} in {object}: need a {artefact}",
    "help me {qverb} {object} with {tool}",
    "{name} agent for {object}",
    "can any agent {qverb} {object} in {lang}?",
    "{name}: {focus}",
    "need a {artefact} about {focus} for {object} in {region}",
    "please {qverb} the {object} we got from {company}",
    "an agent to {qverb} {object}, {focus} matters most",
)
COMPOUND_QUERY_TEMPLATES: tuple[str, ...] = (
    "{qverb} {object} and then {qverb_b} {object_b}",
    "{qverb} {object} for {focus}, also {qverb_b} {object_b}",
    "I need to {qverb} {object}. After that, {qverb_b} {object_b}.",
)
# Word-level paraphrases applied to query intents.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "report": ("write-up", "summary"),
    "contracts": ("agreements",),
    "customers": ("clients",),
    "invoices": ("bills",),
    "documents": ("paperwork", "files"),
    "analysis": ("assessment",),
    "review": ("check",),
    "patients": ("people under care",),
    "employees": ("staff",),
    "errors": ("mistakes",),
    "plan": ("roadmap",),
    "list": ("rundown",),
    "draft": ("first version",),
    "checklist": ("to-do list",),
    "summary": ("recap", "overview"),
    "requests": ("asks",),
    "deadlines": ("due dates",),
    "problems": ("issues",),
}
